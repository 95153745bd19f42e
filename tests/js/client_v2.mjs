// The TypeScript SDK v2 client (@modelcontextprotocol/client, 2026-07-28), unmodified, against
// two or more nodes: list the tools, create, list, search through the client's roots, delete
// through the confirmation form (round 1 and round 2 on different nodes, the SDK answering the
// input_required result itself), then send the same confirmation again and get the recorded
// outcome, marked as a replay. Prints one JSON line; tests/test_ts_interop.py checks it against
// the store.
//
//   NOTES_URLS=http://127.0.0.1:8700/mcp,http://127.0.0.1:8701/mcp NOTES_TOKEN=alice-demo-token \
//     node tests/js/client_v2.mjs

import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';

import { answerForm, argsFromEnv, report, rotatingFetch } from './rotation.mjs';

const { urls, token, workspace, root } = argsFromEnv();
const rotation = rotatingFetch(urls);
const transport = new StreamableHTTPClientTransport(new URL(urls[0]), {
  fetch: rotation.fetch,
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client(
  { name: 'ts-v2-interop', version: '0' },
  {
    // What a client must declare for every tool to work: form elicitation (notes_delete,
    // notes_archive) and roots (notes_search without a workspace).
    capabilities: { elicitation: { form: {} }, roots: {} },
    versionNegotiation: { mode: 'auto' },
  },
);
const forms = [];
client.setRequestHandler('elicitation/create', async (request) => {
  const params = request.params;
  forms.push({ message: params.message, requestedSchema: params.requestedSchema });
  return answerForm(params.requestedSchema, workspace);
});
let rootsAsked = 0;
client.setRequestHandler('roots/list', async () => {
  rootsAsked += 1;
  return { roots: [{ uri: root, name: 'Documents' }] };
});

const out = { client: '@modelcontextprotocol/client' };
await client.connect(transport);
out.protocolVersion = client.getNegotiatedProtocolVersion?.() ?? null;
out.era = client.getProtocolEra?.() ?? null;

const listed = await client.listTools();
out.tools = listed.tools.map((t) => t.name).sort();

const created = await client.callTool({
  name: 'notes_create',
  arguments: { workspaceUri: workspace, title: 'TS v2 interop', body: 'written by client_v2.mjs' },
});
out.created = created.structuredContent;

const list = await client.callTool({ name: 'notes_list', arguments: { workspaceUri: workspace } });
out.listedTitles = list.structuredContent.notes.map((n) => n.title).sort();

const search = await client.callTool({ name: 'notes_search', arguments: { title: 'TPS report' } });
out.searched = search.structuredContent;
out.rootsAsked = rootsAsked;

const deleteArgs = { workspaceUri: workspace, title: 'TPS report' };
const deleted = await client.callTool({ name: 'notes_delete', arguments: deleteArgs });
out.deleted = { isError: deleted.isError ?? false, structuredContent: deleted.structuredContent };
out.forms = forms;

// The client's retry of its confirmation (as after a lost response): the very round-2 request,
// on the next node. The recorded outcome comes back, marked as a replay; nothing more is deleted.
const round2 = rotation.hops.find((h) => h.name === 'notes_delete' && h.retry);
const sent = JSON.parse(round2.body).params;
const again = await client.callTool({
  name: 'notes_delete',
  arguments: deleteArgs,
  requestState: sent.requestState,
  inputResponses: sent.inputResponses,
});
out.replayed = {
  isError: again.isError ?? false,
  structuredContent: again.structuredContent,
  replay: again._meta?.['dev.notes-cluster/replay'] === true,
};

// A refusal reaches the user as the tool's own text (no client-side schema error).
const refused = await client.callTool({
  name: 'notes_list',
  arguments: { workspaceUri: 'file:///Users/alice/Documents/Notes-evil' },
});
out.refused = { isError: refused.isError ?? false, text: refused.content[0]?.text ?? null };

await client.close();
report(out, rotation.hops);
