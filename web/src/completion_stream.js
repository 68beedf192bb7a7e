// Reads a streamed chat completion from fetch's body: bytes through TextDecoder (streaming, so
// a character split across chunks stays whole), events through the SSE parser, and each chunk's
// parts handed to `on`: content(text), reasoning(text), toolCalls(calls so far),
// citations(list), usage(usage), retract({reason}), finish(reason). Resolves with the error
// object the server sent mid-stream, if it sent one. Reading stops at [DONE]: the answer is
// whole there, and a connection cut after it is no failure. A body that breaks off before it
// rejects (fetch's TypeError), which the page reports as a lost connection.
//
// A retract is chatflow's: output moderation judged the answer unsafe after part of it was
// shown, and the stream's last chunk carries "chatflow": {"retract": {"reason"}} beside
// finish_reason "content_filter". It comes before that chunk's finish, and no content after it
// counts: what was shown is to be removed.
import { interpretEvent, SseParser } from './sse.js';

// What the page says in place of a retracted answer.
export function retractMessage(retract) {
  if (retract && retract.reason === 'moderation_unavailable') {
    return 'This answer was withdrawn: the content filter could not check it. Try again later.';
  }
  return 'This answer was withdrawn by the content filter after it was shown.';
}

export async function readCompletion(body, on) {
  let failed = null;
  let retracted = false;
  let ended = false; // [DONE] was read
  const toolCalls = [];
  const parser = new SseParser(({ data }) => {
    const event = interpretEvent(data);
    if (event.error) {
      failed = event.error;
      return;
    }
    if (event.done) {
      ended = true;
      return;
    }
    if (ended) return;
    const chunk = event.chunk;
    if (chunk.usage) on.usage(chunk.usage);
    if (chunk.chatflow && chunk.chatflow.citations) on.citations(chunk.chatflow.citations);
    if (chunk.chatflow && chunk.chatflow.retract && !retracted) {
      retracted = true;
      if (on.retract) on.retract(chunk.chatflow.retract);
    }
    for (const choice of chunk.choices || []) {
      if (retracted) {
        if (choice.finish_reason) on.finish(choice.finish_reason);
        continue;
      }
      const delta = choice.delta || {};
      if (delta.reasoning_content) on.reasoning(delta.reasoning_content);
      if (delta.content) on.content(delta.content);
      if (delta.tool_calls) {
        for (const call of delta.tool_calls) {
          const slot = toolCalls[call.index ?? 0] ??= { name: '', arguments: '' };
          if (call.function && call.function.name) slot.name += call.function.name;
          if (call.function && call.function.arguments) slot.arguments += call.function.arguments;
        }
        on.toolCalls(toolCalls.filter(Boolean));
      }
      if (choice.finish_reason) on.finish(choice.finish_reason);
    }
  });
  const reader = body.getReader();
  const decoder = new TextDecoder('utf-8');
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parser.push(decoder.decode(value, { stream: true }));
    if (ended) {
      reader.cancel().catch(() => {});
      return failed;
    }
  }
  parser.push(decoder.decode());
  parser.end();
  return failed;
}
