// A fetch that sends each HTTP request to the next node in turn, like a load balancer with no
// affinity, and records where each one went (tests/test_ts_interop.py reads the record).
//
// The SDK under test believes it talks to one endpoint (the first URL); this fetch rewrites the
// address of every request to node i mod n for the i-th request.

// With `duplicateAnswers`, a JSON-RPC response the client POSTs (its answer to the server's
// elicitation/create or roots/list, 2025-11-25) is sent a second time, to the next node, as a
// client would after losing the 202: the hop records both statuses.
export function rotatingFetch(urls, { duplicateAnswers = false } = {}) {
  const hops = [];
  const fetchOnNextNode = async (input, init = {}) => {
    const index = hops.length % urls.length;
    const target = new URL(urls[index]);
    const url = new URL(typeof input === 'string' || input instanceof URL ? input : input.url);
    url.host = target.host;
    url.pathname = target.pathname;
    let message = {};
    if (typeof init.body === 'string' && init.body.length > 0) {
      try {
        message = JSON.parse(init.body);
      } catch {
        message = {};
      }
    }
    const params = message.params ?? {};
    const hop = {
      node: index,
      httpMethod: init.method ?? 'GET',
      method: message.method ?? (message.result !== undefined ? 'response' : null),
      name: typeof params.name === 'string' ? params.name : null,
      id: message.id ?? null,
      retry: typeof params.requestState === 'string',
      body: typeof init.body === 'string' ? init.body : null,
    };
    hops.push(hop);
    const response = await fetch(url, init);
    hop.status = response.status;
    if (duplicateAnswers && hop.method === 'response') {
      const again = (index + 1) % urls.length;
      const copy = new URL(url);
      copy.host = new URL(urls[again]).host;
      const second = await fetch(copy, init);
      hop.duplicate = { node: again, status: second.status };
      await second.arrayBuffer();
    }
    return response;
  };
  return { fetch: fetchOnNextNode, hops };
}

// The form's pick: the 2024 TPS report (see nodes/serving/demo.py), confirmed.
export const CREATED_2024 = '2024-07-01';

// What a user at the prompt answers: the confirmation form of notes_delete / notes_archive gets
// the 2024 TPS report, confirmed; notes_search's "which workspace" form gets `workspace`.
export function answerForm(requestedSchema, workspace) {
  const properties = requestedSchema.properties;
  if (properties.noteId !== undefined) {
    return { action: 'accept', content: { noteId: pick2024(requestedSchema), confirm: true } };
  }
  if (properties.workspaceUri !== undefined) {
    return { action: 'accept', content: { workspaceUri: workspace } };
  }
  throw new Error(`unexpected form ${JSON.stringify(requestedSchema)}`);
}

export function pick2024(requestedSchema) {
  const options = requestedSchema.properties.noteId.oneOf;
  const choice = options.find((o) => o.title.includes(CREATED_2024));
  if (choice === undefined) throw new Error(`no 2024 option in ${JSON.stringify(options)}`);
  return choice.const;
}

export function argsFromEnv() {
  const urls = (process.env.NOTES_URLS ?? '').split(',').filter((u) => u.length > 0);
  const token = process.env.NOTES_TOKEN;
  if (urls.length < 2 || !token) {
    throw new Error('set NOTES_URLS (two or more node URLs, comma-separated) and NOTES_TOKEN');
  }
  return {
    urls,
    token,
    workspace: process.env.NOTES_WORKSPACE ?? 'file:///Users/alice/Documents/Notes',
    root: process.env.NOTES_ROOT ?? 'file:///Users/alice/Documents',
  };
}

// One JSON line on stdout: what the test asserts on. Hops keep their request bodies only where a
// test needs them (none: the bodies are dropped to keep the line small).
export function report(out, hops) {
  const summary = hops.map(({ body, ...hop }) => hop);
  process.stdout.write(`${JSON.stringify({ ...out, hops: summary })}\n`);
}
