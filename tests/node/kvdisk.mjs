// kvdisk.mjs: one step of the disk KV cache test (t_server_kvdisk.sh drives
// the server restarts). Usage: node kvdisk.mjs PHASE STATE.json
//   cold:       first request ever: nothing cached; writes the greedy answer
//   warm:       after a restart: the shared prefix comes from disk (cached tokens
//               reported, their prefill skipped) and the greedy answer is the same
//   rejected:   the cache files were corrupted: nothing may be reused
//   tool1/2:    a tool-call turn, then (after a restart) its replay with
//               re-serialized arguments must still match the stored DSML
//   vis1/2:     a thinking answer displaced by another conversation, then
//               (after a restart) continued without its reasoning
import fs from 'node:fs';
import OpenAI from 'openai';
import { BASE, API_KEY, MODEL, assert } from './util.mjs';

const [phase, out] = process.argv.slice(2);
const openai = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: API_KEY, maxRetries: 0 });
const system = 'You are a careful assistant who answers questions about the weather in great detail. '.repeat(8);
const ask = (q) => openai.chat.completions.create({
  model: MODEL, max_tokens: 4, temperature: 0, thinking: { type: 'disabled' },
  messages: [{ role: 'system', content: system }, { role: 'user', content: q }],
});

const DSML = '\uFF5CDSML\uFF5C';
const tool = { type: 'function', function: { name: 'get_weather', description: 'Weather', parameters: { type: 'object', properties: { location: { type: 'string' }, days: { type: 'array' } } } } };
const toolScript = `Need it.</think>\n\n<${DSML}tool_calls>\n<${DSML}invoke name="get_weather">\n<${DSML}parameter name="location" string="true">Oslo</${DSML}parameter>\n<${DSML}parameter name="days" string="false">[1,2]</${DSML}parameter>\n</${DSML}invoke>\n</${DSML}tool_calls>`;
if (phase === 'tool1' || phase === 'tool2') {
  const msgs = [{ role: 'system', content: system }, { role: 'user', content: 'Weather?' }];
  if (phase === 'tool1') {
    const r = await openai.chat.completions.create({ model: MODEL, messages: msgs, tools: [tool], max_tokens: 200, minke_script: toolScript });
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    fs.writeFileSync(out, JSON.stringify(r));
  } else {
    const first = JSON.parse(fs.readFileSync(out, 'utf8'));
    const m = first.choices[0].message;
    const calls = JSON.parse(JSON.stringify(m.tool_calls));
    calls[0].function.arguments = JSON.stringify({ days: [1, 2], location: 'Oslo' }); // re-serialized by the client
    const r = await openai.chat.completions.create({ model: MODEL, tools: [tool], max_tokens: 2, messages: [...msgs,
      { role: 'assistant', content: m.content, reasoning_content: m.reasoning_content, tool_calls: calls },
      { role: 'tool', tool_call_id: calls[0].id, content: 'sunny' }] });
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    console.log(`tool2: prompt ${r.usage.prompt_tokens} cached ${cached}`);
    assert.ok(cached >= first.usage.prompt_tokens + first.usage.completion_tokens - 1,
      `after restart the exact DSML must be replayed from the cache file's tool map: cached ${cached}`);
  }
  console.log(`ok   kvdisk ${phase}`);
  process.exit(0);
}

if (phase === 'vis1' || phase === 'vis2') {
  // a thinking answer, sent back without its reasoning: the snapshot written
  // when another conversation displaces it must be keyed by the visible text
  const msgs = [{ role: 'system', content: system }, { role: 'user', content: 'Is it cold in Oslo?' }];
  if (phase === 'vis1') {
    const r = await openai.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 60, minke_script: 'Hidden plan.</think>Yes, quite cold.' });
    assert.equal(r.choices[0].message.content, 'Yes, quite cold.');
    assert.equal(r.choices[0].finish_reason, 'stop');
    fs.writeFileSync(out, JSON.stringify(r.usage));
    // another conversation takes the live session (the first one goes to disk)
    await openai.chat.completions.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'Unrelated question about cooking pasta' }] });
  } else {
    const first = JSON.parse(fs.readFileSync(out, 'utf8'));
    const r = await openai.chat.completions.create({ model: MODEL, max_tokens: 2,
      messages: [...msgs, { role: 'assistant', content: 'Yes, quite cold.' }, { role: 'user', content: 'And in Rome?' }] });
    const cached = r.usage.prompt_tokens_details.cached_tokens;
    console.log(`vis2: prompt ${r.usage.prompt_tokens} cached ${cached}`);
    assert.ok(cached >= first.prompt_tokens + first.completion_tokens, `cached ${cached} vs ${first.prompt_tokens}+${first.completion_tokens}`);
  }
  console.log(`ok   kvdisk ${phase}`);
  process.exit(0);
}

const r = await ask('What is the weather in Oslo?');
const cached = r.usage.prompt_tokens_details.cached_tokens;
console.log(`${phase}: prompt ${r.usage.prompt_tokens} cached ${cached}`);
if (phase === 'cold') {
  assert.equal(cached, 0);
  fs.writeFileSync(out, JSON.stringify({ content: r.choices[0].message.content, prompt: r.usage.prompt_tokens }));
} else if (phase === 'warm') {
  const before = JSON.parse(fs.readFileSync(out, 'utf8'));
  assert.equal(r.usage.prompt_tokens, before.prompt);
  assert.ok(cached >= 100, `cached ${cached}: the system prompt should come from the disk cache`);
  assert.ok(cached < r.usage.prompt_tokens);
  assert.equal(r.choices[0].message.content, before.content, 'restored state gives the same greedy answer');
  // another question with the same prefix also starts from the stored system prompt
  const r2 = await ask('And in Rome?');
  assert.ok(r2.usage.prompt_tokens_details.cached_tokens >= 100, JSON.stringify(r2.usage));
} else if (phase === 'rejected') {
  assert.equal(cached, 0, 'a corrupted cache file must not be used');
} else {
  throw new Error(`unknown phase ${phase}`);
}
console.log(`ok   kvdisk ${phase}`);
