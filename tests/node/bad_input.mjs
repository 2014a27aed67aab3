// bad_input.mjs: hostile and broken requests against `minke serve`. Each must
// get the right 4xx status in the endpoint's own error shape, and the server
// must keep serving: after every case a good request has to succeed. Also: a
// client that disconnects mid-stream must stop its generation and free the
// worker. Expects a server started with --api-key, --ctx 1024, --max-body-mb 1.
import { BASE, API_KEY, MODEL, check, done, assert, raw, expectOpenAIError, expectAnthropicError } from './util.mjs';

const good = JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'ok' }], max_tokens: 1 });
async function stillServing() {
  const r = await raw('/v1/chat/completions', { body: good });
  assert.equal(r.status, 200, `follow-up good request: ${r.status} ${r.text}`);
  assert.equal(r.json.choices[0].message.role, 'assistant');
}

const chat = (obj) => JSON.stringify({ model: MODEL, max_tokens: 1, messages: [{ role: 'user', content: 'hi' }], ...obj });

const openaiCases = [
  ['malformed JSON', '/v1/chat/completions', '{"model": "x", "messages": [', 400],
  ['empty body', '/v1/chat/completions', '', 400],
  ['body is an array', '/v1/chat/completions', '[1,2,3]', 400],
  ['missing messages', '/v1/chat/completions', JSON.stringify({ model: MODEL }), 400],
  ['messages not an array', '/v1/chat/completions', chat({ messages: 'hello' }), 400],
  ['empty messages', '/v1/chat/completions', chat({ messages: [] }), 400],
  ['message not an object', '/v1/chat/completions', chat({ messages: [42] }), 400],
  ['unknown role', '/v1/chat/completions', chat({ messages: [{ role: 'wizard', content: 'x' }] }), 400],
  ['content wrong type', '/v1/chat/completions', chat({ messages: [{ role: 'user', content: 12 }] }), 400],
  ['max_tokens string', '/v1/chat/completions', chat({ max_tokens: 'ten' }), 400],
  ['max_tokens negative', '/v1/chat/completions', chat({ max_tokens: -5 }), 400],
  ['temperature string', '/v1/chat/completions', chat({ temperature: 'hot' }), 400],
  ['temperature out of range', '/v1/chat/completions', chat({ temperature: 99 }), 400],
  ['stream not boolean', '/v1/chat/completions', chat({ stream: 'yes' }), 400],
  ['stop wrong type', '/v1/chat/completions', chat({ stop: 5 }), 400],
  ['tools wrong shape', '/v1/chat/completions', chat({ tools: [{ type: 'function' }] }), 400],
  ['tool_calls wrong shape', '/v1/chat/completions', chat({ messages: [{ role: 'assistant', tool_calls: 'x' }] }), 400],
  ['unknown reasoning_effort', '/v1/chat/completions', chat({ reasoning_effort: 'ultra' }), 400],
  ['model wrong type', '/v1/chat/completions', chat({ model: 7 }), 400],
  ['unknown model', '/v1/chat/completions', chat({ model: 'gpt-17' }), 404],
  ['n > 1', '/v1/chat/completions', chat({ n: 3 }), 400],
  ['orphan tool result', '/v1/chat/completions', chat({ messages: [{ role: 'user', content: 'x' }, { role: 'tool', tool_call_id: 'call_nobody', content: 'r' }] }), 400],
  ['orphan function_call_output', '/v1/responses', JSON.stringify({ model: MODEL, input: [{ type: 'function_call_output', call_id: 'call_x', output: 'r' }] }), 400],
  ['deep nesting', '/v1/chat/completions', chat({ metadata: JSON.parse('['.repeat(300) + ']'.repeat(300)) }), 400],
  ['missing prompt', '/v1/completions', JSON.stringify({ model: MODEL }), 400],
  ['prompt wrong type', '/v1/completions', JSON.stringify({ model: MODEL, prompt: { a: 1 } }), 400],
  ['missing input', '/v1/responses', JSON.stringify({ model: MODEL }), 400],
  ['input item unknown type', '/v1/responses', JSON.stringify({ model: MODEL, input: [{ type: 'mystery' }] }), 400],
  ['responses forced tool_choice', '/v1/responses', JSON.stringify({ model: MODEL, input: 'x', tool_choice: { type: 'function', name: 'f' } }), 400],
];

for (const [name, path, body, status] of openaiCases) {
  await check(`openai error: ${name} -> ${status}`, async () => {
    expectOpenAIError(await raw(path, { body }), status);
    await stillServing();
  });
}

const anthropicCases = [
  ['malformed JSON', '{"messages": [}', 400],
  ['missing messages', JSON.stringify({ model: MODEL, max_tokens: 5 }), 400],
  ['bad role', JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: 'system', content: 'x' }] }), 400],
  ['bad block', JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_use' }] }] }), 400],
  ['bad thinking', JSON.stringify({ model: MODEL, max_tokens: 5, thinking: 'yes', messages: [{ role: 'user', content: 'x' }] }), 400],
  ['orphan tool_result', JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] }] }), 400],
  ['unknown model', JSON.stringify({ model: 'claude-nonexistent', max_tokens: 5, messages: [{ role: 'user', content: 'x' }] }), 404],
];
for (const [name, body, status] of anthropicCases) {
  await check(`anthropic error: ${name} -> ${status}`, async () => {
    expectAnthropicError(await raw('/v1/messages', { body }), status);
    await stillServing();
  });
}

// a tool result is bound only to a call replayed in the same request (never
// to the live session alone), so an orphan is a 400 in the spec's 4.9 wording
await check('orphan tool outputs: spec wording, retry by replaying the history', async () => {
  const r = await raw('/v1/responses', { body: JSON.stringify({ model: MODEL, input: [{ type: 'function_call_output', call_id: 'call_x', output: 'r' }] }) });
  expectOpenAIError(r, 400);
  assert.match(r.json.error.message, /^Responses continuation state is not available for call_id call_x; retry by replaying the full input history/);
  const a = await raw('/v1/messages', { body: JSON.stringify({ model: MODEL, max_tokens: 5,
    messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'r' }] }] }) });
  expectAnthropicError(a, 400);
  assert.match(a.json.error.message, /^Anthropic continuation state is not available for tool_use_id toolu_x; retry by replaying the full messages history/);
});

await check('invalid UTF-8 in the body -> 400', async () => {
  const bytes = Buffer.concat([Buffer.from('{"model":"deepseek-v4-flash","messages":[{"role":"user","content":"'), Buffer.from([0xff, 0xfe, 0xc3]), Buffer.from('"}]}')]);
  expectOpenAIError(await raw('/v1/chat/completions', { body: bytes }), 400);
  expectAnthropicError(await raw('/v1/messages', { body: bytes }), 400);
  await stillServing();
});

await check('oversized body -> 413', async () => {
  const big = chat({ messages: [{ role: 'user', content: 'x'.repeat(2 * 1024 * 1024) }] });
  expectOpenAIError(await raw('/v1/chat/completions', { body: big }), 413);
  await stillServing();
});

await check('prompt longer than the context -> 400 context_length_exceeded', async () => {
  const long = 'lorem ipsum dolor sit amet '.repeat(400);
  const r = await raw('/v1/chat/completions', { body: chat({ messages: [{ role: 'user', content: long }] }) });
  expectOpenAIError(r, 400);
  assert.equal(r.json.error.code, 'context_length_exceeded');
  assert.ok(r.json.error.n_prompt_tokens >= 1024);
  const a = await raw('/v1/messages', { body: JSON.stringify({ model: MODEL, max_tokens: 5, messages: [{ role: 'user', content: long }] }) });
  expectAnthropicError(a, 400);
  assert.match(a.json.error.message, /context/);
  await stillServing();
});

await check('authentication: missing or wrong key -> 401; bearer and x-api-key accepted', async () => {
  expectOpenAIError(await raw('/v1/chat/completions', { body: good, auth: false }), 401);
  expectOpenAIError(await raw('/v1/models', { method: 'GET', auth: false }), 401);
  expectOpenAIError(await raw('/v1/chat/completions', { body: good, auth: false, headers: { authorization: 'Bearer wrong' } }), 401);
  expectAnthropicError(await raw('/v1/messages', { body: good, auth: false, headers: { 'x-api-key': 'wrong' } }), 401);
  const ok = await raw('/v1/chat/completions', { body: good, auth: false, headers: { 'x-api-key': API_KEY } });
  assert.equal(ok.status, 200);
});

await check('CORS (--cors): preflight 204 and headers on every response', async () => {
  const pre = await fetch(`${BASE}/v1/chat/completions`, { method: 'OPTIONS', headers: { origin: 'http://example.com', 'access-control-request-method': 'POST' } });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get('access-control-allow-origin'), '*');
  assert.match(pre.headers.get('access-control-allow-methods'), /POST/);
  const r = await raw('/v1/chat/completions', { body: good });
  assert.equal(r.headers.get('access-control-allow-origin'), '*');
  const e = await raw('/v1/chat/completions', { body: '{' });
  assert.equal(e.headers.get('access-control-allow-origin'), '*');
});

await check('unknown endpoint and method', async () => {
  expectOpenAIError(await raw('/v1/nothing', { body: good }), 404);
  expectOpenAIError(await raw('/v1/chat/completions', { method: 'GET' }), 405);
  expectOpenAIError(await raw('/v1/models/not-a-model', { method: 'GET' }), 404);
  const h = await raw('/health', { method: 'GET' });
  assert.equal(h.status, 200);
  assert.equal(h.json.status, 'ok');
});

await (process.env.MINKE_ASAN === '1' ? () => console.log('skip keepalive (ASan)') : check)('keepalive comments while a long prompt is prefilled', async () => {
  const r = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'weather report for the coast '.repeat(170) }], max_tokens: 1, stream: true }),
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /text\/event-stream/);
  const text = await r.text();
  assert.ok(text.includes(': prefill\n\n'), 'no keepalive during a multi-second prefill');
  assert.ok(text.trimEnd().endsWith('data: [DONE]'));
});

await check('client disconnect mid-stream stops generation and frees the worker', async () => {
  const ctrl = new AbortController();
  const r = await fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', signal: ctrl.signal,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Write a long story' }], max_tokens: 900, stream: true }),
  });
  assert.equal(r.status, 200);
  const reader = r.body.getReader();
  let got = '';
  while (!got.includes('reasoning_content') && !got.includes('"content":"')) {
    const { value, done: end } = await reader.read();
    if (end) break;
    got += Buffer.from(value).toString();
  }
  ctrl.abort();
  const t0 = Date.now();
  // 900 tokens would take far longer than this; the worker must be free again
  await stillServing();
  const waited = Date.now() - t0;
  assert.ok(waited < 4000, `worker busy for ${waited} ms after the client left`);
});

await check('client disconnect while a non-stream request waits', async () => {
  const ctrl = new AbortController();
  const p = fetch(`${BASE}/v1/chat/completions`, {
    method: 'POST', signal: ctrl.signal,
    headers: { 'content-type': 'application/json', authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'Another long story' }], max_tokens: 900 }),
  }).catch(() => null);
  await new Promise((res) => setTimeout(res, 300));
  ctrl.abort();
  await p;
  const t0 = Date.now();
  await stillServing();
  assert.ok(Date.now() - t0 < 4000, 'worker freed');
});

done();
