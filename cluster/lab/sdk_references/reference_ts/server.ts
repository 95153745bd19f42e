/**
 * The TypeScript SDK reference server: our notes tool contract on the official MCP TypeScript
 * SDK v2 (`@modelcontextprotocol/server` 2.4.0, `@modelcontextprotocol/node`), for the MRTR
 * conformance pack (`notes-cluster conformance`). An experiment: nothing in the product uses it.
 *
 *   export NOTES_CLUSTER_SDK_STATE_KEY=$(head -c 32 /dev/urandom | base64)   # every instance
 *   node server.ts --redis redis://127.0.0.1:6379/0 --port 8900 &
 *   node server.ts --redis redis://127.0.0.1:6379/0 --port 8901 &
 *
 * Each instance prints its endpoint URL once it listens. Node 22 runs this file as it is (type
 * stripping: only erasable TypeScript syntax here). Tools: notes_create, notes_list, and the
 * confirm-before-act notes_delete and notes_archive, for the demo principals (tokens
 * alice-demo-token, bob-demo-token) and the load principals. Notes live in the shared Redis
 * under `--prefix`.
 *
 * Written as the SDK's input_required guide (docs/servers/input-required.md) and its MRTR
 * example (examples/mrtr/server.ts) show: a handler that returns `inputRequired(...)` with an
 * `inputRequired.elicit` form and a `requestState` minted by `createRequestStateCodec` (HMAC,
 * TTL, and the guide's `bind` of method and client id), whose `verify` runs as the server's
 * `requestState.verify` hook; `inputResponse` reads the answer; `createMcpHandler` serves a
 * fresh server per request; `requireBearerAuth` checks the token; `toNodeHandler` puts it on
 * `node:http`. What the SDK leaves to the author, two flags add:
 *
 *   --bind-call         the state also names the tool and its arguments, checked on re-entry
 *                       (the codec binds only what `bind` returns: by the guide, method and
 *                       client, so a state would otherwise serve another tool or arguments)
 *   --used-state-store  the action and the state's outcome are recorded under the state's
 *                       nonce in one atomic step (a Lua script), so a retry gets the recorded
 *                       outcome and a used state cannot act again
 */
import { randomBytes } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { parseArgs } from 'node:util';

import { localhostHostValidation, toNodeHandler } from '@modelcontextprotocol/node';
import type { AuthInfo, CallToolResult, InputRequiredResult, ServerContext } from '@modelcontextprotocol/server';
import {
    createMcpHandler,
    createRequestStateCodec,
    inputRequired,
    inputResponse,
    McpServer,
    OAuthError,
    OAuthErrorCode,
    requireBearerAuth
} from '@modelcontextprotocol/server';
import { createClient } from 'redis';
import * as z from 'zod/v4';

const ALICE_NOTES = 'file:///Users/alice/Documents/Notes';
const ALICE_ARCHIVE = 'file:///Users/alice/Documents/Archive';
const BOB_NOTES = 'file:///Users/bob/Notes';
const TEAM = 'file:///Shared/Team';
/** The demo fixture (nodes/serving/demo.py): published demo tokens, grants and archives. */
const TOKENS: Record<string, string> = { 'alice-demo-token': 'alice', 'bob-demo-token': 'bob' };
const GRANTS: Record<string, string[]> = { alice: [ALICE_NOTES, ALICE_ARCHIVE, TEAM], bob: [BOB_NOTES, TEAM] };
const ARCHIVES: Record<string, string> = { [ALICE_NOTES]: ALICE_ARCHIVE };
/** The load fixture (nodes/serving/load_fixture.py): tenants 0..3, an inbox archiving to an archive,
 * principals u<t>a and u<t>b with their published load tokens, for `loadgen --foreign`. */
const LOAD_TENANTS = 4;
for (let t = 0; t < LOAD_TENANTS; t++) {
    const inbox = `file:///load/t${t}/inbox`;
    const archive = `file:///load/t${t}/archive`;
    ARCHIVES[inbox] = archive;
    for (const side of ['a', 'b']) {
        TOKENS[`u${t}${side}-load-token`] = `u${t}${side}`;
        GRANTS[`u${t}${side}`] = [inbox, archive];
    }
}
const MAX_CANDIDATES = 50;
/** A used-state record outlives its state by this much. */
const REPLAY_GRACE_MS = 60_000;

const { values: opts } = parseArgs({
    options: {
        redis: { type: 'string' },
        prefix: { type: 'string', default: 'ncref' },
        host: { type: 'string', default: '127.0.0.1' },
        port: { type: 'string', default: '0' },
        'state-ttl': { type: 'string', default: '300' },
        'used-state-store': { type: 'boolean', default: false },
        'bind-call': { type: 'boolean', default: false }
    }
});
const key = Buffer.from(process.env.NOTES_CLUSTER_SDK_STATE_KEY ?? '', 'base64');
if (!opts.redis || key.length !== 32) {
    console.error('usage: NOTES_CLUSTER_SDK_STATE_KEY=<32 bytes base64> node server.ts --redis URL [--port N]');
    process.exit(2);
}
const ttlSeconds = Number(opts['state-ttl']);
const P = `${opts.prefix}:ts`;

const redis = createClient({ url: opts.redis });
await redis.connect();

type Note = { id: string; ws: string; title: string; version: number };
type Op = 'delete' | 'move';
type State = {
    nonce: string;
    ws: string;
    title: string;
    target: string;
    candidates: Record<string, number>;
    call?: string;
};

const noteKey = (id: string) => `${P}:note:${id}`;
const indexKey = (ws: string, title: string) => `${P}:idx:${ws}\u0000${title}`;

/** One atomic step: (with a record) the recorded outcome of the nonce, else act if the note is
 * unchanged, and (with a record) record the outcome under the nonce. */
const ACT = `
local record = ARGV[9] == '1'
if record then
  local rec = redis.call('GET', KEYS[1])
  if rec then
    local sep = string.find(rec, '|', 1, true)
    local digest, outcome = string.sub(rec, 1, sep - 1), string.sub(rec, sep + 1)
    if digest == ARGV[1] then return {'replay', outcome} end
    return {'conflict', outcome}
  end
end
if ARGV[2] == 'cancel' then return {'cancelled', ''} end
if ARGV[2] == 'decline' then
  if record then redis.call('SET', KEYS[1], ARGV[1] .. '|declined', 'PX', ARGV[8]) end
  return {'declined', 'declined'}
end
local ws = redis.call('HGET', KEYS[2], 'ws')
if not ws then return {'gone', ''} end
if ws ~= ARGV[4] or redis.call('HGET', KEYS[2], 'version') ~= ARGV[5] then return {'changed', ''} end
redis.call('SREM', KEYS[3], ARGV[3])
if ARGV[6] == 'delete' then
  redis.call('DEL', KEYS[2])
else
  redis.call('HSET', KEYS[2], 'ws', ARGV[7])
  redis.call('HINCRBY', KEYS[2], 'version', 1)
  redis.call('SADD', KEYS[4], ARGV[3])
end
local outcome = 'executed:' .. ARGV[3]
if record then redis.call('SET', KEYS[1], ARGV[1] .. '|' .. outcome, 'PX', ARGV[8]) end
return {'executed', outcome}
`;

async function createNote(ws: string, title: string, body: string): Promise<Note> {
    const id = 'n' + randomBytes(8).toString('hex');
    await redis
        .multi()
        .hSet(noteKey(id), { ws, title, body, version: '1' })
        .sAdd(indexKey(ws, title), id)
        .exec();
    return { id, ws, title, version: 1 };
}

async function findNotes(ws: string, title: string): Promise<Note[]> {
    const ids = (await redis.sMembers(indexKey(ws, title))).sort();
    const notes: Note[] = [];
    for (const id of ids.slice(0, MAX_CANDIDATES + 1)) {
        const h = await redis.hGetAll(noteKey(id));
        if (h.ws === ws) notes.push({ id, ws, title: h.title, version: Number(h.version) });
    }
    return notes;
}

const uri = (n: Note) => `${n.ws}/${n.id}.md`;
const principal = (ctx: ServerContext) => ctx.http?.authInfo?.clientId ?? '';

/** The guide's binding: the method and the authenticated client. */
const codec = createRequestStateCodec<State>({
    key,
    ttlSeconds,
    bind: ctx => `${ctx.mcpReq.method}\u0000${principal(ctx)}`
});

function fail(text: string): CallToolResult {
    return { content: [{ type: 'text', text }], isError: true };
}

function done(structured: Record<string, unknown>): CallToolResult {
    return { content: [{ type: 'text', text: JSON.stringify(structured) }], structuredContent: structured };
}

function authorized(ctx: ServerContext, ws: string): boolean {
    return (GRANTS[principal(ctx)] ?? []).includes(ws);
}

function form(notes: Note[], question: string, confirmTitle: string) {
    const pick: Record<string, unknown> = {
        type: 'string',
        title: 'Note',
        oneOf: notes.map(n => ({ const: n.id, title: `${n.title} (${uri(n)})` }))
    };
    if (notes.length === 1) pick.default = notes[0].id;
    return inputRequired.elicit({
        message: question,
        requestedSchema: {
            type: 'object',
            properties: { noteId: pick, confirm: { type: 'boolean', title: confirmTitle, default: false } },
            required: ['noteId', 'confirm']
        } as never
    });
}

type Confirming = { name: string; op: Op; formKey: string; resultKey: string; question: string; confirmTitle: string };
const DELETE: Confirming = {
    name: 'notes_delete',
    op: 'delete',
    formKey: 'confirm_delete',
    resultKey: 'deleted',
    question: 'Which note should be deleted?',
    confirmTitle: 'Delete this note permanently'
};
const ARCHIVE: Confirming = {
    name: 'notes_archive',
    op: 'move',
    formKey: 'confirm_archive',
    resultKey: 'archived',
    question: 'Which note should be archived?',
    confirmTitle: 'Move this note to the archive'
};

const callOf = (tool: string, args: Record<string, unknown>) => JSON.stringify([tool, args.workspaceUri, args.title]);

async function ask(kind: Confirming, args: { workspaceUri: string; title: string }, ctx: ServerContext) {
    const ws = args.workspaceUri;
    if (!authorized(ctx, ws)) return fail(`Not authorized for ${ws}`);
    let target = '';
    if (kind.op === 'move') {
        target = ARCHIVES[ws] ?? '';
        if (!target || !authorized(ctx, target)) return fail(`${ws} has no archive you may use`);
    }
    const notes = await findNotes(ws, args.title);
    if (notes.length === 0) return fail(`No note titled ${JSON.stringify(args.title)} in ${ws}`);
    const state: State = {
        nonce: randomBytes(16).toString('base64url'),
        ws,
        title: args.title,
        target,
        candidates: Object.fromEntries(notes.map(n => [n.id, n.version]))
    };
    if (opts['bind-call']) state.call = callOf(kind.name, args);
    return inputRequired({
        inputRequests: { [kind.formKey]: form(notes, kind.question, kind.confirmTitle) },
        requestState: await codec.mint(state, ctx)
    });
}

async function confirming(
    kind: Confirming,
    args: { workspaceUri: string; title: string },
    ctx: ServerContext
): Promise<CallToolResult | InputRequiredResult> {
    const state = ctx.mcpReq.requestState<State>();
    const view = inputResponse(ctx.mcpReq.inputResponses, kind.formKey);
    if (state === undefined || view.kind === 'missing') return ask(kind, args, ctx);
    if (opts['bind-call'] && state.call !== callOf(kind.name, args)) return fail('Invalid or expired requestState');
    if (view.kind !== 'elicit') return fail('Invalid answer');
    let action = view.action;
    const content = view.content ?? {};
    if (action === 'accept' && content.confirm !== true) action = 'decline';
    const noteId = action === 'accept' ? String(content.noteId) : '';
    if (action === 'accept' && !(noteId in state.candidates)) return fail('noteId is not one of the offered notes');
    const record = Boolean(opts['used-state-store']);
    const [status, outcome] = (await redis.eval(ACT, {
        keys: [
            `${P}:used:${state.nonce}`,
            noteKey(noteId || 'none'),
            indexKey(state.ws, state.title),
            indexKey(state.target || state.ws, state.title)
        ],
        arguments: [
            JSON.stringify([action, noteId]),
            action,
            noteId,
            state.ws,
            String(state.candidates[noteId] ?? 0),
            kind.op,
            state.target,
            String(ttlSeconds * 1000 + REPLAY_GRACE_MS),
            record ? '1' : '0'
        ]
    })) as [string, string];
    if (status === 'changed') return ask(kind, args, ctx);
    if (status === 'executed' || (status === 'replay' && outcome.startsWith('executed:'))) {
        return done({ [kind.resultKey]: true, noteId: outcome.slice('executed:'.length) });
    }
    if (status === 'declined' || status === 'cancelled' || status === 'replay') return done({ [kind.resultKey]: false });
    return fail(`Nothing was done (${status})`);
}

const where = { workspaceUri: z.string(), title: z.string() };

function buildServer(): McpServer {
    const server = new McpServer(
        { name: 'notes-reference-typescript-sdk', version: '1.0.0' },
        { capabilities: { tools: {} }, requestState: { verify: codec.verify } }
    );
    server.registerTool(
        'notes_create',
        { description: 'Create a note titled `title` in `workspaceUri`.', inputSchema: z.object({ ...where, body: z.string().optional() }) },
        async (args, ctx): Promise<CallToolResult> => {
            if (!authorized(ctx, args.workspaceUri)) return fail(`Not authorized for ${args.workspaceUri}`);
            const n = await createNote(args.workspaceUri, args.title, args.body ?? '');
            return done({ noteId: n.id, uri: uri(n), title: n.title });
        }
    );
    server.registerTool(
        'notes_list',
        { description: 'The notes titled `title` in `workspaceUri`.', inputSchema: z.object(where) },
        async (args, ctx): Promise<CallToolResult> => {
            if (!authorized(ctx, args.workspaceUri)) return fail(`Not authorized for ${args.workspaceUri}`);
            const notes = await findNotes(args.workspaceUri, args.title);
            return done({ notes: notes.map(n => ({ noteId: n.id, title: n.title, uri: uri(n), version: n.version })) });
        }
    );
    for (const kind of [DELETE, ARCHIVE]) {
        server.registerTool(
            kind.name,
            { description: `${kind.question} Asks the user to pick and confirm a note titled \`title\`.`, inputSchema: z.object(where) },
            async (args, ctx) => confirming(kind, args, ctx)
        );
    }
    return server;
}

const verifier = {
    async verifyAccessToken(token: string): Promise<AuthInfo> {
        const who = TOKENS[token];
        if (!who) throw new OAuthError(OAuthErrorCode.InvalidToken, 'unknown token');
        return { token, clientId: who, scopes: [], expiresAt: Math.floor(Date.now() / 1000) + 86_400 };
    }
};
const gate = requireBearerAuth({ verifier });
const mcp = createMcpHandler(buildServer, { responseMode: 'json' });
const handle = toNodeHandler({
    fetch: async request => {
        const auth = await gate(request);
        return auth instanceof Response ? auth : mcp.fetch(request, { authInfo: auth });
    }
});
const validateHost = localhostHostValidation();
const http = createServer((req, res) => {
    if (!validateHost(req, res)) return;
    void handle(req, res);
});
http.listen(Number(opts.port), opts.host, () => {
    const { address, port } = http.address() as AddressInfo;
    console.log(`http://${address}:${port}/mcp`);
});
