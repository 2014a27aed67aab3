// util.mjs: shared helpers of the server tests: the server address from the
// environment, a tiny check/report harness, raw HTTP for bad-input tests, and
// the DSML text used to script tool calls (the tiny test model is random, so
// tool-call turns are scripted through the server's --test-hooks).
import assert from 'node:assert/strict';

export const BASE = process.env.MINKE_URL || 'http://127.0.0.1:8000';
export const API_KEY = process.env.MINKE_API_KEY || 'test-key';
export const MODEL = 'deepseek-v4-flash';

let failures = 0;
let passes = 0;

export async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    passes++;
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

export function done() {
  console.log(`${passes} passed, ${failures} failed`);
  process.exit(failures ? 1 : 0);
}

export async function raw(path, { method = 'POST', body, headers = {}, auth = true } = {}) {
  const h = { ...headers };
  if (auth) h.authorization = `Bearer ${API_KEY}`;
  if (body !== undefined && !h['content-type']) h['content-type'] = 'application/json';
  const r = await fetch(BASE + path, { method, body, headers: h });
  const text = await r.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: r.status, text, json, headers: r.headers };
}

export function expectOpenAIError(res, status) {
  assert.equal(res.status, status, `status ${res.status} body ${res.text}`);
  assert.ok(res.json && res.json.error, `error body: ${res.text}`);
  assert.equal(typeof res.json.error.message, 'string');
  assert.equal(typeof res.json.error.type, 'string');
}

export function expectAnthropicError(res, status) {
  assert.equal(res.status, status, `status ${res.status} body ${res.text}`);
  assert.equal(res.json?.type, 'error', res.text);
  assert.equal(typeof res.json.error.type, 'string');
  assert.equal(typeof res.json.error.message, 'string');
}

const DSML = '\uFF5CDSML\uFF5C';
// One scripted assistant turn with a tool call, as the model writes it.
export function dsmlToolTurn({ reasoning = 'Need the tool.', content = 'Checking.', calls }) {
  const invokes = calls.map(({ name, args }) => {
    const params = Object.entries(args).map(([k, v]) =>
      typeof v === 'string'
        ? `<${DSML}parameter name="${k}" string="true">${v}</${DSML}parameter>`
        : `<${DSML}parameter name="${k}" string="false">${JSON.stringify(v)}</${DSML}parameter>`);
    return `<${DSML}invoke name="${name}">\n${params.join('\n')}\n</${DSML}invoke>`;
  });
  const think = reasoning === null ? '' : `${reasoning}</think>`;
  return `${think}${content}\n\n<${DSML}tool_calls>\n${invokes.join('\n')}\n</${DSML}tool_calls>`;
}

export const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the weather',
    parameters: { type: 'object', properties: { location: { type: 'string' }, days: { type: 'array' } }, required: ['location'] },
  },
};

export { assert };
