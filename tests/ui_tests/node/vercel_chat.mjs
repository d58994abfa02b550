// Drives an operative /api/chat endpoint with the AI SDK's own chat client: `AbstractChat`
// (what useChat wraps) with `DefaultChatTransport`, over real HTTP.
//
// usage: node vercel_chat.mjs <base-url> <scenario> [text]
//   env OPERATIVE_UI_NODE_MODULES: the node_modules holding `ai`
// scenarios: say (one message), approve / deny (a message whose tool call needs
// approval, then the answer), stop (stop the chat once a tool call is running).
// Prints one JSON object: the chat's messages, status and error, and each response's
// status, stream header and raw body (the client itself checks neither).

import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.OPERATIVE_UI_NODE_MODULES;
const ai = await import(pathToFileURL(join(modules, "ai", "dist", "index.js")).href);
const { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } = ai;

const [base, scenario, text = ""] = process.argv.slice(2);

class State {
  constructor() {
    this.status = "ready";
    this.error = undefined;
    this.messages = [];
  }
  pushMessage(message) {
    this.messages = this.messages.concat(message);
  }
  popMessage() {
    this.messages = this.messages.slice(0, -1);
  }
  replaceMessage(index, message) {
    this.messages = [...this.messages.slice(0, index), message, ...this.messages.slice(index + 1)];
  }
  snapshot(thing) {
    return structuredClone(thing);
  }
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

const responses = [];
const reading = [];
async function recordingFetch(url, init) {
  const response = await fetch(url, init);
  const record = {
    status: response.status,
    header: response.headers.get("x-vercel-ai-ui-message-stream"),
    contentType: response.headers.get("content-type"),
    body: "",
    request: JSON.parse(init.body),
  };
  responses.push(record);
  if (!response.body) return response;
  const [mine, theirs] = response.body.tee();
  reading.push((async () => {
    const decoder = new TextDecoder();
    const reader = mine.getReader();
    try {
      for (;;) {
        const { done, value } = await reader.read();
        if (done) break;
        record.body += decoder.decode(value, { stream: true });
      }
    } catch (error) {
      record.readError = String(error);
    }
  })());
  return new Response(theirs, { status: response.status, headers: response.headers });
}

const errors = [];
const chat = new Chat({
  id: `chat-${scenario}-${Date.now()}`,
  transport: new DefaultChatTransport({ api: `${base}/api/chat`, fetch: recordingFetch }),
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  onError: (error) => errors.push(String(error?.message ?? error)),
});

async function until(check, what) {
  const started = Date.now();
  while (!check()) {
    if (Date.now() - started > 20000) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

function toolParts() {
  return chat.messages.flatMap((m) => m.parts.filter((p) => p.type.startsWith("tool-")));
}

if (scenario === "say") {
  await chat.sendMessage({ text });
} else if (scenario === "approve" || scenario === "deny") {
  await chat.sendMessage({ text });
  const asked = toolParts().find((p) => p.state === "approval-requested");
  if (!asked) throw new Error("no tool part asks for approval");
  await chat.addToolApprovalResponse({
    id: asked.approval.id,
    approved: scenario === "approve",
    reason: scenario === "deny" ? "not today" : undefined,
  });
  await until(() => responses.length === 2 && chat.status !== "submitted" && chat.status !== "streaming", "the approval's answer");
} else if (scenario === "stop") {
  const sent = chat.sendMessage({ text });
  await until(() => toolParts().some((p) => p.state === "input-available"), "a running tool call");
  await chat.stop();
  await sent;
} else {
  throw new Error(`unknown scenario ${scenario}`);
}
await Promise.all(reading);
process.stdout.write(
  JSON.stringify({ status: chat.status, error: chat.error ? String(chat.error.message) : null, errors, messages: chat.messages, responses }),
);
