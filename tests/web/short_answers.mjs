// Signing in to a server with a history store (sessionPipeline: the test model behind a keys
// file), as the browser tests that need the server's own sessions do.
import { ready } from './browser.mjs';

// Signs in on the page's form with `key`, waits for the app and its models, and sends every
// chat completion on with `max_tokens` set to `maxTokens`, so the test model's answers stay short.
export async function signInWithShortAnswers(page, key, maxTokens) {
  await page.waitForSelector('#signin:not([hidden])');
  await page.fill('#api-key', key);
  await page.press('#api-key', 'Enter');
  await ready(page);
  await page.route('**/v1/chat/completions', (route) => {
    const body = JSON.parse(route.request().postData());
    route.continue({ postData: JSON.stringify({ ...body, max_tokens: maxTokens }) });
  });
}
