// The TypeScript SDK v1 client (@modelcontextprotocol/sdk, 2025-11-25), unmodified, against two or
// more nodes through their legacy adapter: initialize (a session any node serves), list the tools,
// create, list, search through the client's roots, delete through the confirmation form (the
// node's elicitation/create on the call's SSE stream, answered by a POST that lands on another
// node), with every answer POSTed twice, as after a lost 202: only the first copy counts, so one
// note is deleted. Then the same delete again: the form offers only the notes left, and a
// decline deletes nothing. Prints one JSON line; tests/test_ts_interop.py checks it against the
// store.
//
//   NOTES_URLS=http://127.0.0.1:8700/mcp,http://127.0.0.1:8701/mcp NOTES_TOKEN=alice-demo-token \
//     node tests/js/client_legacy.mjs

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ElicitRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import { answerForm, argsFromEnv, report, rotatingFetch } from './rotation.mjs';

const { urls, token, workspace, root } = argsFromEnv();
const rotation = rotatingFetch(urls, { duplicateAnswers: true });
const transport = new StreamableHTTPClientTransport(new URL(urls[0]), {
  fetch: rotation.fetch,
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client(
  { name: 'ts-legacy-interop', version: '0' },
  // What a 2025-11-25 client must declare: form elicitation (notes_delete, notes_archive) and
  // roots (notes_search without a workspace; with roots, every workspace must lie inside them).
  { capabilities: { elicitation: { form: {} }, roots: { listChanged: true } } },
);
const forms = [];
let answer = 'accept';
client.setRequestHandler(ElicitRequestSchema, async (request) => {
  const params = request.params;
  forms.push({ message: params.message, requestedSchema: params.requestedSchema });
  if (answer !== 'accept') return { action: answer };
  return answerForm(params.requestedSchema, workspace);
});
let rootsAsked = 0;
client.setRequestHandler(ListRootsRequestSchema, async () => {
  rootsAsked += 1;
  return { roots: [{ uri: root, name: 'Documents' }] };
});

const out = { client: '@modelcontextprotocol/sdk' };
await client.connect(transport);
out.protocolVersion = transport.protocolVersion ?? null;
out.sessionId = transport.sessionId !== undefined;

const listed = await client.listTools();
out.tools = listed.tools.map((t) => t.name).sort();

const created = await client.callTool({
  name: 'notes_create',
  arguments: { workspaceUri: workspace, title: 'TS legacy interop', body: 'by client_legacy.mjs' },
});
out.created = created.structuredContent;

const list = await client.callTool({ name: 'notes_list', arguments: { workspaceUri: workspace } });
out.listedTitles = list.structuredContent.notes.map((n) => n.title).sort();

const search = await client.callTool({ name: 'notes_search', arguments: { title: 'TPS report' } });
out.searched = search.structuredContent;

const deleteArgs = { workspaceUri: workspace, title: 'TPS report' };
const deleted = await client.callTool({ name: 'notes_delete', arguments: deleteArgs });
out.deleted = { isError: deleted.isError ?? false, structuredContent: deleted.structuredContent };

// The retry: the same delete again, declined this time. The form shows what is left.
answer = 'decline';
const again = await client.callTool({ name: 'notes_delete', arguments: deleteArgs });
out.again = { isError: again.isError ?? false, structuredContent: again.structuredContent };
out.forms = forms;
out.rootsAsked = rootsAsked;

// A refusal reaches the user as the tool's own text (no client-side schema error).
const refused = await client.callTool({
  name: 'notes_list',
  arguments: { workspaceUri: 'file:///Shared/Team' },
});
out.refused = { isError: refused.isError ?? false, text: refused.content[0]?.text ?? null };

await transport.terminateSession();
await client.close();
report(out, rotation.hops);
