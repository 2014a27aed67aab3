// http.mjs: the two raw HTTP calls the shell tests need, so they do not
// depend on curl: `node http.mjs health URL` exits 0 when GET URL/health
// answers 200; `node http.mjs post URL PATH JSON` POSTs JSON and copies the
// response body to stdout as it arrives (SSE included), exiting 0 on 2xx.
const [cmd, base, path, body] = process.argv.slice(2);
const headers = { authorization: `Bearer ${process.env.MINKE_API_KEY || 'test-key'}`, 'content-type': 'application/json' };
try {
  if (cmd === 'health') {
    const r = await fetch(`${base}/health`, { headers });
    process.exit(r.ok ? 0 : 1);
  } else if (cmd === 'post') {
    const r = await fetch(base + path, { method: 'POST', headers, body });
    for await (const chunk of r.body) process.stdout.write(chunk);
    process.exit(r.ok ? 0 : 1);
  }
  console.error('usage: node http.mjs health URL | post URL PATH JSON');
  process.exit(2);
} catch (e) {
  process.exit(1);
}
