// sdk.mjs: drives every endpoint of `minke serve` with the official `openai`
// and `@anthropic-ai/sdk` clients, streaming and not, with and without tools
// and reasoning, and asserts on the parsed objects. The model is a tiny random
// one: free text is noise, so tests check shapes, counts and protocol, and
// tool-call turns are scripted with the server's test hook (minke_script).
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { BASE, API_KEY, MODEL, check, done, assert, dsmlToolTurn, weatherTool } from './util.mjs';

// Under ASan the engine is ~10x slower: skip the cases that only add more
// long tool-schema prompts (the tool paths stay covered by the others).
const QUICK = process.env.MINKE_ASAN === '1';
const slow = (name, fn) => (QUICK ? console.log(`skip ${name} (ASan)`) : check(name, fn));

const openai = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: API_KEY, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: BASE, apiKey: API_KEY, maxRetries: 0 });

const user = (content) => [{ role: 'user', content }];
const toolScript = dsmlToolTurn({ calls: [{ name: 'get_weather', args: { location: 'Beijing', days: [1, 2] } }] });
const WEATHER_ARGS = { location: 'Beijing', days: [1, 2] };

function checkUsage(u, maxCompletion) {
  assert.ok(u.prompt_tokens > 0);
  assert.ok(u.completion_tokens >= 0 && u.completion_tokens <= maxCompletion, `completion_tokens ${u.completion_tokens}`);
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
  assert.ok(u.prompt_tokens_details.cached_tokens >= 0 && u.prompt_tokens_details.cached_tokens <= u.prompt_tokens);
}

// ---------------- OpenAI: models ----------------
await check('openai models.list / retrieve', async () => {
  const list = await openai.models.list();
  assert.ok(list.data.length >= 1);
  assert.equal(list.data[0].id, MODEL);
  const m = await openai.models.retrieve(MODEL);
  assert.equal(m.id, MODEL);
  assert.equal(m.object, 'model');
  await assert.rejects(openai.models.retrieve('no-such-model'), (e) => e.status === 404);
});

// ---------------- OpenAI: chat completions ----------------
await check('chat non-stream with reasoning (default thinking)', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages: user('Hello there'), max_tokens: 5, seed: 7 });
  assert.match(r.id, /^chatcmpl-\d+$/);
  assert.equal(r.object, 'chat.completion');
  assert.equal(r.model, MODEL);
  assert.equal(r.choices.length, 1);
  const c = r.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['length', 'stop'].includes(c.finish_reason), c.finish_reason);
  if (c.finish_reason === 'length') assert.equal(r.usage.completion_tokens, 5);
  // thinking mode: everything before </think> is reasoning
  assert.ok((c.message.reasoning_content || '').length + c.message.content.length > 0);
  checkUsage(r.usage, 5);
});

await check('chat stream with include_usage', async () => {
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: user('Stream please'), max_tokens: 6, stream: true, stream_options: { include_usage: true }, seed: 3,
  });
  let first = null, finish = null, usage = null, text = '', n = 0;
  for await (const ch of stream) {
    n++;
    assert.equal(ch.object, 'chat.completion.chunk');
    if (ch.usage) { usage = ch.usage; assert.equal(ch.choices.length, 0); continue; }
    const d = ch.choices[0].delta;
    if (!first) first = d;
    text += (d.reasoning_content || '') + (d.content || '');
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  assert.equal(first.role, 'assistant');
  assert.ok(['length', 'stop'].includes(finish));
  assert.ok(usage, 'usage chunk');
  checkUsage(usage, 6);
  assert.ok(n >= 3);
  assert.ok(text.length > 0);
});

await check('chat without thinking, greedy: stream equals non-stream', async () => {
  const req = { model: MODEL, messages: user('Count to three'), max_tokens: 6, temperature: 0, thinking: { type: 'disabled' } };
  const a = await openai.chat.completions.create(req);
  assert.equal(a.choices[0].message.reasoning_content, undefined);
  const stream = await openai.chat.completions.create({ ...req, stream: true });
  let text = '', reasoning = '';
  for await (const ch of stream) {
    text += ch.choices[0]?.delta?.content || '';
    reasoning += ch.choices[0]?.delta?.reasoning_content || '';
  }
  assert.equal(reasoning, '');
  assert.equal(text, a.choices[0].message.content);
  // same prompt again: served from the live KV (all prompt tokens reused)
  const b = await openai.chat.completions.create(req);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
});

await check('seed: same seed, same sample; other seed, other sample', async () => {
  const req = { model: MODEL, messages: user('Pick random words'), max_tokens: 8, temperature: 1, thinking: { type: 'disabled' } };
  const a = await openai.chat.completions.create({ ...req, seed: 1234 });
  const b = await openai.chat.completions.create({ ...req, seed: 1234 });
  const c = await openai.chat.completions.create({ ...req, seed: 98765 });
  assert.equal(a.choices[0].message.content, b.choices[0].message.content);
  assert.notEqual(a.choices[0].message.content, c.choices[0].message.content);
});

await check('a budget cut inside a UTF-8 character: stream and non-stream agree, no broken text', async () => {
  // "Hi 𓀀𓀁" tokenizes to Hi, " " + first byte, then single bytes: 4 tokens end inside 𓀀.
  const req = { model: MODEL, messages: user('Hi'), max_tokens: 4, thinking: { type: 'disabled' }, minke_script: 'Hi \u{13000}\u{13001}' };
  const a = await openai.chat.completions.create(req);
  const stream = await openai.chat.completions.create({ ...req, stream: true });
  let text = '';
  for await (const ch of stream) text += ch.choices[0]?.delta?.content || '';
  assert.equal(a.choices[0].message.content, 'Hi ');
  assert.equal(text, 'Hi ');
  assert.equal(a.choices[0].finish_reason, 'length');
});

await check('chat reasoning_effort none and deepseek-chat disable thinking', async () => {
  for (const extra of [{ reasoning_effort: 'none' }, { model: 'deepseek-chat' }]) {
    const r = await openai.chat.completions.create({ model: MODEL, messages: user('Hi'), max_tokens: 3, ...extra, minke_script: 'Plain answer.' });
    assert.equal(r.choices[0].message.content, 'Plain answer.');
    assert.equal(r.choices[0].message.reasoning_content, undefined);
    assert.equal(r.choices[0].finish_reason, 'length');
  }
});

let firstToolTurn = null;
await check('chat tools non-stream: DSML -> tool_calls', async () => {
  const r = await openai.chat.completions.create({
    model: MODEL, messages: user('Weather in Beijing?'), tools: [weatherTool], max_tokens: 200, minke_script: toolScript,
  });
  const m = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls');
  assert.equal(m.reasoning_content, 'Need the tool.');
  assert.equal(m.content, 'Checking.');
  assert.equal(m.tool_calls.length, 1);
  assert.match(m.tool_calls[0].id, /^call_[0-9a-f]{32}$/);
  assert.equal(m.tool_calls[0].type, 'function');
  assert.equal(m.tool_calls[0].function.name, 'get_weather');
  assert.deepEqual(JSON.parse(m.tool_calls[0].function.arguments), WEATHER_ARGS);
  firstToolTurn = { messages: user('Weather in Beijing?'), response: r };
});

await check('chat tool replay: next turn reuses the live KV (exact DSML, reordered JSON)', async () => {
  const { messages, response } = firstToolTurn;
  const m = response.choices[0].message;
  // the client re-serializes the arguments with other key order and spacing:
  // the remembered DSML bytes are still rendered, keyed by the call id
  const calls = JSON.parse(JSON.stringify(m.tool_calls));
  calls[0].function.arguments = JSON.stringify({ days: [1, 2], location: 'Beijing' }, null, 1);
  const next = [...messages, { role: 'assistant', content: m.content, reasoning_content: m.reasoning_content, tool_calls: calls },
    { role: 'tool', tool_call_id: m.tool_calls[0].id, content: '{"temperature": 22}' }];
  const r = await openai.chat.completions.create({ model: MODEL, messages: next, tools: [weatherTool], max_tokens: 3 });
  const cached = r.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= response.usage.prompt_tokens + response.usage.completion_tokens - 1,
    `cached ${cached} vs previous ${response.usage.prompt_tokens}+${response.usage.completion_tokens}`);
});

await check('thinking-visible: next turn without the reasoning reuses the live KV', async () => {
  const q1 = user('What is 2+2?');
  const a = await openai.chat.completions.create({ model: MODEL, messages: q1, max_tokens: 50, minke_script: 'Simple sum.</think>It is 4.' });
  assert.equal(a.choices[0].message.reasoning_content, 'Simple sum.');
  assert.equal(a.choices[0].message.content, 'It is 4.');
  assert.equal(a.choices[0].finish_reason, 'stop');
  // the client sends the answer back without reasoning_content (as most do)
  const b = await openai.chat.completions.create({ model: MODEL, max_tokens: 2,
    messages: [...q1, { role: 'assistant', content: 'It is 4.' }, { role: 'user', content: 'And 3+3?' }] });
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens + a.usage.completion_tokens,
    `cached ${b.usage.prompt_tokens_details.cached_tokens}, previous turn ${a.usage.prompt_tokens}+${a.usage.completion_tokens}`);
});

await check('prompt snapshot: the same request again reuses the prompt and answers the same', async () => {
  // greedy (thinking off): the second answer must not depend on where the state came from
  const req = { model: MODEL, messages: user('Regenerate this answer, please: a prompt sent twice.'), max_tokens: 8, temperature: 0,
    thinking: { type: 'disabled' } };
  const a = await openai.chat.completions.create(req);
  assert.ok(a.usage.completion_tokens >= 2, `completion_tokens ${a.usage.completion_tokens}`);
  const b = await openai.chat.completions.create(req);
  const cached = b.usage.prompt_tokens_details.cached_tokens;
  assert.equal(b.usage.prompt_tokens, a.usage.prompt_tokens);
  assert.ok(cached >= b.usage.prompt_tokens - 2 && cached <= b.usage.prompt_tokens, `cached ${cached} of ${b.usage.prompt_tokens}`);
  assert.equal(b.choices[0].message.content, a.choices[0].message.content);
  assert.equal(b.usage.completion_tokens, a.usage.completion_tokens);
  // streamed, the third time: same text again
  const stream = await openai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } });
  let text = '', usage = null;
  for await (const ch of stream) {
    if (ch.usage) usage = ch.usage;
    else text += ch.choices[0].delta.content || '';
  }
  assert.equal(text, a.choices[0].message.content);
  assert.ok(usage.prompt_tokens_details.cached_tokens >= usage.prompt_tokens - 2);
});

await check('prompt snapshot: a prompt sharing the last prompt but not its answer reuses the prefix', async () => {
  const sys = { role: 'system', content: `You answer questions about rivers. ${'Rivers flow to the sea and carry water. '.repeat(8)}` };
  const q1 = [sys, { role: 'user', content: 'Name a long river.' }];
  const a = await openai.chat.completions.create({ model: MODEL, messages: q1, max_tokens: 6 });
  // the client edits the answer (or keeps another one) and asks on: the live
  // KV holds the generated answer, so only the snapshot can serve the prefix;
  // thinking mode: the snapshot ends before "<think>", which this turn's
  // rendering replaces by "</think>" + the answer
  const b = await openai.chat.completions.create({ model: MODEL, max_tokens: 2, messages: [...q1,
    { role: 'assistant', content: 'The Nile, an edited answer.' }, { role: 'user', content: 'And a short one?' }] });
  const cached = b.usage.prompt_tokens_details.cached_tokens;
  assert.ok(cached >= a.usage.prompt_tokens - 2 && cached < b.usage.prompt_tokens,
    `cached ${cached}, first prompt ${a.usage.prompt_tokens}, second prompt ${b.usage.prompt_tokens}`);
});

await check('tool turn replayed without reasoning_content still reuses the live KV', async () => {
  const q = user('Weather in Oslo?');
  const a = await openai.chat.completions.create({ model: MODEL, messages: q, tools: [weatherTool], max_tokens: 200,
    minke_script: dsmlToolTurn({ calls: [{ name: 'get_weather', args: { location: 'Oslo' } }] }) });
  const m = a.choices[0].message;
  assert.equal(a.choices[0].finish_reason, 'tool_calls');
  const b = await openai.chat.completions.create({ model: MODEL, tools: [weatherTool], max_tokens: 2, messages: [...q,
    { role: 'assistant', content: m.content, tool_calls: m.tool_calls },
    { role: 'tool', tool_call_id: m.tool_calls[0].id, content: 'sunny' }] });
  assert.ok(b.usage.prompt_tokens_details.cached_tokens >= a.usage.prompt_tokens + a.usage.completion_tokens - 1,
    `cached ${b.usage.prompt_tokens_details.cached_tokens}, previous turn ${a.usage.prompt_tokens}+${a.usage.completion_tokens}`);
});

await slow('chat history with an unknown tool-call id renders canonically', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, tools: [weatherTool], max_tokens: 2, messages: [
    { role: 'user', content: 'Weather?' },
    { role: 'assistant', content: '', tool_calls: [{ id: 'call_client_made', type: 'function', function: { name: 'get_weather', arguments: '{"location":"Oslo"}' } }] },
    { role: 'tool', tool_call_id: 'call_client_made', content: 'cold' }] });
  assert.equal(r.usage.completion_tokens, 2);
});

await check('chat tools stream: argument deltas while generating', async () => {
  const stream = await openai.chat.completions.create({
    model: MODEL, messages: user('Weather in Paris and Rome?'), tools: [weatherTool], max_tokens: 300, stream: true,
    minke_script: dsmlToolTurn({ content: '', calls: [{ name: 'get_weather', args: { location: 'Paris' } }, { name: 'get_weather', args: { location: 'Rome', days: [3] } }] }),
  });
  const calls = [];
  let argDeltas = 0, finish = null, reasoning = '', content = '';
  for await (const ch of stream) {
    const c = ch.choices[0];
    if (!c) continue;
    reasoning += c.delta.reasoning_content || '';
    content += c.delta.content || '';
    for (const t of c.delta.tool_calls || []) {
      if (!calls[t.index]) calls[t.index] = { id: t.id, name: t.function.name, args: '' };
      else argDeltas++;
      calls[t.index].args += t.function?.arguments || '';
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(reasoning, 'Need the tool.');
  assert.equal(content, '');
  assert.equal(calls.length, 2);
  assert.ok(argDeltas >= 4, `argument deltas ${argDeltas}`);
  assert.deepEqual(JSON.parse(calls[0].args), { location: 'Paris' });
  assert.deepEqual(JSON.parse(calls[1].args), { location: 'Rome', days: [3] });
  assert.notEqual(calls[0].id, calls[1].id);
  for (const c of calls) { assert.match(c.id, /^call_[0-9a-f]{32}$/); assert.equal(c.name, 'get_weather'); }
});

await slow('chat tool_choice none: tools not offered, DSML stays text', async () => {
  const r = await openai.chat.completions.create({ model: MODEL, messages: user('x'), tools: [weatherTool], tool_choice: 'none', max_tokens: 2 });
  assert.equal(r.choices[0].message.tool_calls, undefined);
  const withTools = await openai.chat.completions.create({ model: MODEL, messages: user('x'), tools: [weatherTool], max_tokens: 2 });
  assert.ok(withTools.usage.prompt_tokens > r.usage.prompt_tokens + 100, 'tool schemas rendered only when offered');
});

await check('chat stop sequences (stream and not)', async () => {
  const req = { model: MODEL, messages: user('x'), max_tokens: 30, thinking: false, stop: ['STOP', 'never'], minke_script: 'Hello STOP world' };
  const r = await openai.chat.completions.create(req);
  assert.equal(r.choices[0].message.content, 'Hello ');
  assert.equal(r.choices[0].finish_reason, 'stop');
  const s = await openai.chat.completions.create({ ...req, stream: true });
  let text = '', fin = null;
  for await (const ch of s) { text += ch.choices[0]?.delta?.content || ''; fin = ch.choices[0]?.finish_reason || fin; }
  assert.equal(text, 'Hello ');
  assert.equal(fin, 'stop');
});

await check('chat max_completion_tokens and multi-part content', async () => {
  const r = await openai.chat.completions.create({
    model: MODEL, max_completion_tokens: 2, messages: [{ role: 'system', content: 'Be brief.' },
      { role: 'user', content: [{ type: 'text', text: 'Hello ' }, { type: 'text', text: 'world' }] }],
  });
  assert.equal(r.usage.completion_tokens, 2);
  assert.equal(r.choices[0].finish_reason, 'length');
});

await check('chat response_format is rendered into the prompt', async () => {
  const plain = await openai.chat.completions.create({ model: MODEL, messages: user('List two colors'), max_tokens: 1 });
  const json = await openai.chat.completions.create({ model: MODEL, messages: user('List two colors'), max_tokens: 1,
    response_format: { type: 'json_schema', json_schema: { name: 'colors', schema: { type: 'object', properties: { colors: { type: 'array' } } } } } });
  assert.ok(json.usage.prompt_tokens > plain.usage.prompt_tokens + 10, `${json.usage.prompt_tokens} vs ${plain.usage.prompt_tokens}`);
});

// ---------------- OpenAI: legacy completions ----------------
await check('completions non-stream and stream', async () => {
  const r = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4, seed: 5 });
  assert.match(r.id, /^cmpl-\d+$/);
  assert.equal(r.object, 'text_completion');
  assert.equal(typeof r.choices[0].text, 'string');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 4);
  const s = await openai.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4, stream: true, stream_options: { include_usage: true }, thinking: false, minke_script: 'The end.' });
  let text = '', fin = null, usage = null;
  for await (const ch of s) {
    if (ch.usage) usage = ch.usage;
    text += ch.choices[0]?.text || '';
    fin = ch.choices[0]?.finish_reason || fin;
  }
  assert.equal(text, 'The end.');
  assert.ok(['length', 'stop'].includes(fin));
  assert.ok(usage && usage.prompt_tokens > 0);
});

// ---------------- OpenAI: Responses ----------------
await check('responses non-stream with reasoning summary', async () => {
  const r = await openai.responses.create({ model: MODEL, input: 'Hi', max_output_tokens: 40, reasoning: { effort: 'high', summary: 'auto' },
    minke_script: 'Think a bit.</think>Hello!' });
  assert.match(r.id, /^resp_[0-9a-f]{24}$/);
  assert.equal(r.object, 'response');
  assert.equal(r.status, 'completed');
  assert.equal(r.output[0].type, 'reasoning');
  assert.equal(r.output[0].summary[0].text, 'Think a bit.');
  assert.equal(r.output[1].type, 'message');
  assert.equal(r.output[1].content[0].type, 'output_text');
  assert.equal(r.output_text, 'Hello!');
  assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
});

await check('responses max_output_tokens -> incomplete', async () => {
  // scripted: the random tiny model may end its reply within 3 tokens on its own
  const r = await openai.responses.create({ model: MODEL, input: [{ role: 'user', content: 'Hello' }], max_output_tokens: 3,
    minke_script: 'Let me think about it.</think>Hello, how are you today?' });
  assert.equal(r.status, 'incomplete');
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.usage.output_tokens, 3);
});

await check('responses stream: event sequence and final response', async () => {
  const stream = await openai.responses.create({ model: MODEL, input: 'Hi', stream: true, reasoning: { summary: 'auto' }, instructions: 'Be nice.',
    minke_script: 'Hmm.</think>Hello there!' });
  const types = [];
  let seq = -1, text = '', final = null;
  for await (const ev of stream) {
    types.push(ev.type);
    assert.equal(ev.sequence_number, seq + 1);
    seq = ev.sequence_number;
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.completed') final = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types.at(-1), 'response.completed');
  assert.ok(types.includes('response.reasoning_summary_text.delta'));
  assert.equal(text, 'Hello there!');
  assert.equal(final.status, 'completed');
  assert.equal(final.output.find((o) => o.type === 'message').content[0].text, 'Hello there!');
  assert.ok(final.usage.input_tokens > 0);
});

await slow('responses tools: function_call items, stream and not, and replay', async () => {
  const tools = [{ type: 'function', name: 'get_weather', description: 'Get the weather', parameters: weatherTool.function.parameters }];
  const r = await openai.responses.create({ model: MODEL, input: 'Weather?', tools, minke_script: toolScript });
  const fc = r.output.find((o) => o.type === 'function_call');
  assert.ok(fc, JSON.stringify(r.output));
  assert.equal(fc.name, 'get_weather');
  assert.match(fc.call_id, /^call_[0-9a-f]{32}$/);
  assert.deepEqual(JSON.parse(fc.arguments), WEATHER_ARGS);
  const stream = await openai.responses.create({ model: MODEL, input: 'Weather?', tools, stream: true, minke_script: toolScript });
  let deltas = 0, args = '', final = null;
  for await (const ev of stream) {
    if (ev.type === 'response.function_call_arguments.delta') { deltas++; args += ev.delta; }
    if (ev.type === 'response.completed') final = ev.response;
  }
  assert.ok(deltas >= 2, `argument deltas ${deltas}`);
  assert.deepEqual(JSON.parse(args), WEATHER_ARGS);
  const sfc = final.output.find((o) => o.type === 'function_call');
  assert.deepEqual(JSON.parse(sfc.arguments), WEATHER_ARGS);
  // replay the call with its output (stateless: full input)
  const next = await openai.responses.create({ model: MODEL, tools, max_output_tokens: 2,
    input: [{ role: 'user', content: 'Weather?' }, { type: 'function_call', call_id: sfc.call_id, name: 'get_weather', arguments: sfc.arguments },
      { type: 'function_call_output', call_id: sfc.call_id, output: '{"temperature": 22}' }] });
  assert.ok(['incomplete', 'completed'].includes(next.status));
  await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', previous_response_id: r.id }), (e) => e.status === 400);
  await assert.rejects(openai.responses.create({ model: MODEL, input: 'x', tools, tool_choice: 'required' }), (e) => e.status === 400);
});

// ---------------- Anthropic ----------------
await check('anthropic messages non-stream: thinking + text', async () => {
  const r = await anthropic.messages.create({ model: MODEL, max_tokens: 60, messages: [{ role: 'user', content: 'Hello' }],
    thinking: { type: 'enabled', budget_tokens: 1024 }, minke_script: 'Let me think.</think>Hi!' });
  assert.match(r.id, /^msg_/);
  assert.equal(r.type, 'message');
  assert.equal(r.role, 'assistant');
  assert.equal(r.content[0].type, 'thinking');
  assert.equal(r.content[0].thinking, 'Let me think.');
  assert.equal(r.content[1].type, 'text');
  assert.equal(r.content[1].text, 'Hi!');
  assert.equal(r.stop_reason, 'end_turn');
  assert.ok(r.usage.output_tokens > 0);
  assert.ok(r.usage.cache_creation_input_tokens + r.usage.cache_read_input_tokens + r.usage.input_tokens > 0);
});

await check('anthropic thinking disabled, max_tokens, system blocks', async () => {
  const r = await anthropic.messages.create({ model: MODEL, max_tokens: 3, system: [{ type: 'text', text: 'You are terse.' }],
    thinking: { type: 'disabled' }, messages: [{ role: 'user', content: [{ type: 'text', text: 'Hello' }] }] });
  assert.equal(r.stop_reason, 'max_tokens');
  assert.ok(r.content.every((b) => b.type === 'text'));
  assert.equal(r.usage.output_tokens, 3);
});

await check('anthropic stream: events and finalMessage', async () => {
  const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 60, messages: [{ role: 'user', content: 'Hello' }],
    minke_script: 'Thinking here.</think>Answer here.' });
  const events = [];
  stream.on('streamEvent', (e) => events.push(e.type));
  const m = await stream.finalMessage();
  assert.equal(events[0], 'message_start');
  assert.equal(events.at(-1), 'message_stop');
  assert.equal(m.content[0].type, 'thinking');
  assert.equal(m.content[0].thinking, 'Thinking here.');
  assert.equal(m.content[1].text, 'Answer here.');
  assert.equal(m.stop_reason, 'end_turn');
});

await check('anthropic tool_use (stream and not) and tool_result round trip', async () => {
  const tools = [{ name: 'get_weather', description: 'Get the weather', input_schema: weatherTool.function.parameters }];
  const r = await anthropic.messages.create({ model: MODEL, max_tokens: 300, tools, messages: [{ role: 'user', content: 'Weather?' }], minke_script: toolScript });
  assert.equal(r.stop_reason, 'tool_use');
  const tu = r.content.find((b) => b.type === 'tool_use');
  assert.match(tu.id, /^toolu_[0-9a-f]{32}$/);
  assert.equal(tu.name, 'get_weather');
  assert.deepEqual(tu.input, WEATHER_ARGS);
  const stream = anthropic.messages.stream({ model: MODEL, max_tokens: 300, tools, messages: [{ role: 'user', content: 'Weather?' }], minke_script: toolScript });
  let jsonDeltas = 0;
  stream.on('streamEvent', (e) => { if (e.type === 'content_block_delta' && e.delta.type === 'input_json_delta') jsonDeltas++; });
  const m = await stream.finalMessage();
  assert.ok(jsonDeltas >= 2, `input_json_delta events ${jsonDeltas}`);
  const stu = m.content.find((b) => b.type === 'tool_use');
  assert.deepEqual(stu.input, WEATHER_ARGS);
  assert.equal(m.stop_reason, 'tool_use');
  const next = await anthropic.messages.create({ model: MODEL, max_tokens: 2, tools, messages: [
    { role: 'user', content: 'Weather?' },
    { role: 'assistant', content: m.content },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: stu.id, content: '{"temperature": 22}' }] }] });
  assert.ok(next.usage.cache_read_input_tokens > 0, JSON.stringify(next.usage));
});

await check('anthropic count_tokens', async () => {
  const messages = [{ role: 'user', content: 'How many tokens is this?' }];
  const c = await anthropic.messages.countTokens({ model: MODEL, messages });
  const r = await anthropic.messages.create({ model: MODEL, max_tokens: 1, messages });
  assert.equal(c.input_tokens, r.usage.input_tokens + r.usage.cache_read_input_tokens + r.usage.cache_creation_input_tokens);
});

await check('anthropic stop_sequences', async () => {
  const r = await anthropic.messages.create({ model: MODEL, max_tokens: 30, thinking: { type: 'disabled' }, stop_sequences: ['STOP'],
    messages: [{ role: 'user', content: 'x' }], minke_script: 'Hello STOP world' });
  assert.equal(r.content[0].text, 'Hello ');
  assert.equal(r.stop_reason, 'stop_sequence');
  assert.equal(r.stop_sequence, 'STOP');
});

done();
