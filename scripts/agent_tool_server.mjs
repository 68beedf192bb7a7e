#!/usr/bin/env node
// A small HTTP tool for graphs/agent.yaml: POST /weather with {"city": ...} answers a made-up
// forecast as JSON; POST /orders creates an order once per Idempotency-Key (a retried call gets
// the first answer again). Loopback only; the port is the first argument (default 9100, 0 picks
// one) and is printed on start.
//
//   node scripts/agent_tool_server.mjs 9100
import http from 'node:http';

const forecasts = { Paris: 'sunny, 21 °C', Oslo: 'rain, 9 °C', Tokyo: 'cloudy, 17 °C' };
const orders = new Map();  // Idempotency-Key -> the order made for it

function answer(response, status, body) {
  response.writeHead(status, { 'Content-Type': 'application/json' });
  response.end(JSON.stringify(body));
}

const server = http.createServer((request, response) => {
  let text = '';
  request.setEncoding('utf8');
  request.on('data', (part) => { text += part; });
  request.on('end', () => {
    let body;
    try { body = JSON.parse(text); } catch { return answer(response, 400, { error: 'the body is not JSON' }); }
    if (request.method !== 'POST') return answer(response, 405, { error: 'POST only' });
    if (request.url === '/weather') {
      const forecast = forecasts[body.city];
      if (!forecast) return answer(response, 404, { error: `no forecast for ${JSON.stringify(body.city)}` });
      return answer(response, 200, { city: body.city, forecast });
    }
    if (request.url === '/orders') {
      const key = request.headers['idempotency-key'];
      if (!key) return answer(response, 400, { error: 'an Idempotency-Key header is required' });
      if (!orders.has(key)) orders.set(key, { order: `A-${orders.size + 1}`, item: body.item, quantity: body.quantity });
      return answer(response, 200, orders.get(key));
    }
    return answer(response, 404, { error: `no tool at ${request.url}` });
  });
});

server.listen(Number(process.argv[2] ?? 9100), '127.0.0.1', () => {
  console.log(`agent tool server on http://127.0.0.1:${server.address().port} (POST /weather, /orders)`);
});
