// load.mjs: bounded load test of `minke serve`: CLIENTS concurrent clients
// each send PER_CLIENT requests (mixed endpoints, half streaming, tiny
// max_tokens). Every request must be answered correctly (none lost, none
// mixed up: each scripted answer must come back to the client that asked),
// and the server's resident memory must stay flat across rounds.
import fs from 'node:fs';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { BASE, API_KEY, MODEL, check, done, assert } from './util.mjs';

const CLIENTS = Number(process.env.LOAD_CLIENTS || 8);
const PER_CLIENT = Number(process.env.LOAD_REQUESTS || 25);
const ROUNDS = 5;
const PID = Number(process.env.MINKE_PID || 0);
// LOAD_RSS_CHECK=0: report the RSS but do not hold it flat (ASan keeps freed
// blocks in its quarantine, so RSS grows there without a leak; LSan checks
// for leaks when the server exits)
const RSS_CHECK = process.env.LOAD_RSS_CHECK !== '0';

const openai = new OpenAI({ baseURL: `${BASE}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 120000 });
const anthropic = new Anthropic({ baseURL: BASE, apiKey: API_KEY, maxRetries: 0, timeout: 120000 });

function rssKiB() {
  if (!PID) return 0;
  const m = fs.readFileSync(`/proc/${PID}/status`, 'utf8').match(/VmRSS:\s+(\d+)/);
  return m ? Number(m[1]) : 0;
}

// One request; the scripted answer carries the client and request number, so a
// response delivered to the wrong client would be caught.
async function one(client, i) {
  const tag = `c${client}r${i}`;
  const kind = (client + i) % 4;
  const stream = (client * 7 + i) % 2 === 0;
  const base = { thinking: { type: 'disabled' }, minke_script: tag };
  if (kind === 0) {
    const req = { model: MODEL, messages: [{ role: 'user', content: `client ${client} says hi ${i}` }], max_tokens: 2, ...base };
    if (!stream) {
      const r = await openai.chat.completions.create(req);
      return [r.choices[0].message.content, r.usage.completion_tokens];
    }
    let text = '', usage = null;
    for await (const ch of await openai.chat.completions.create({ ...req, stream: true, stream_options: { include_usage: true } })) {
      text += ch.choices[0]?.delta?.content || '';
      if (ch.usage) usage = ch.usage;
    }
    return [text, usage.completion_tokens];
  }
  if (kind === 1) {
    const req = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: `client ${client} asks ${i}` }], ...base };
    if (!stream) {
      const r = await anthropic.messages.create(req);
      return [r.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), r.usage.output_tokens];
    }
    const m = await anthropic.messages.stream(req).finalMessage();
    return [m.content.filter((b) => b.type === 'text').map((b) => b.text).join(''), m.usage.output_tokens];
  }
  if (kind === 2) {
    const req = { model: MODEL, input: `client ${client} input ${i}`, max_output_tokens: 2, reasoning: { effort: 'none' }, minke_script: tag };
    if (!stream) {
      const r = await openai.responses.create(req);
      return [r.output_text, r.usage.output_tokens];
    }
    let text = '', final = null;
    for await (const ev of await openai.responses.create({ ...req, stream: true })) {
      if (ev.type === 'response.output_text.delta') text += ev.delta;
      if (ev.type.startsWith('response.') && ev.response && ev.type !== 'response.created' && ev.type !== 'response.in_progress') final = ev.response;
    }
    assert.ok(final, 'terminal response event');
    return [text, final.usage.output_tokens];
  }
  const req = { model: MODEL, prompt: `client ${client} prompt ${i}`, max_tokens: 2, ...base };
  if (!stream) {
    const r = await openai.completions.create(req);
    return [r.choices[0].text, r.usage.completion_tokens];
  }
  let text = '';
  for await (const ch of await openai.completions.create({ ...req, stream: true })) text += ch.choices[0]?.text || '';
  return [text, 2];
}

// Scripted text is cut at max_tokens=2, so compare with the first two tokens' text.
async function runClient(client, from, to, results) {
  for (let i = from; i < to; i++) {
    const [text, n] = await one(client, i);
    const tag = `c${client}r${i}`;
    assert.ok(tag.startsWith(text) && text.length > 0, `client ${client} request ${i}: got '${text}' for '${tag}'`);
    assert.ok(n >= 1 && n <= 2, `token count ${n}`);
    results.push(tag);
  }
}

await check(`load: ${CLIENTS} clients x ${PER_CLIENT} requests, none lost${PID && RSS_CHECK ? ', RSS flat' : ''}`, async () => {
  const results = [];
  const rss = [];
  const t0 = Date.now();
  const per = Math.ceil(PER_CLIENT / ROUNDS);
  for (let round = 0; round < ROUNDS; round++) {
    const from = round * per, to = Math.min(PER_CLIENT, from + per);
    await Promise.all(Array.from({ length: CLIENTS }, (_, c) => runClient(c, from, to, results)));
    rss.push(rssKiB());
  }
  const secs = (Date.now() - t0) / 1000;
  assert.equal(results.length, CLIENTS * PER_CLIENT);
  assert.equal(new Set(results).size, results.length);
  console.log(`  ${results.length} requests in ${secs.toFixed(1)} s (${(results.length / secs).toFixed(1)} req/s); RSS KiB per round: ${rss.join(' ')}`);
  if (PID && RSS_CHECK) {
    // allow the first round to warm up allocators; later rounds must not grow
    const growth = rss.at(-1) - rss[1];
    assert.ok(growth < 16 * 1024, `RSS grew by ${growth} KiB between round 2 and round ${ROUNDS}`);
  }
});

done();
