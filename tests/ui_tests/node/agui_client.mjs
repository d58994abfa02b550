// Drives operative's POST /api/agui with @ag-ui/client's HttpAgent (what CopilotKit runs).
//
//   node agui_client.mjs <url> <scenario> [text]
//   env OPERATIVE_UI_NODE_MODULES: the node_modules holding `@ag-ui/client`
// scenarios: tool, reasoning, approve, deny, frontend (a client tool), error, disconnect.
//
// Prints one JSON object: the events each run saw (after the client's own validation),
// the client's warnings and errors (it drops unknown events and strips unknown fields
// with only a warning, so the caller checks that there are none), each run's outcome
// and the thread's messages at the end.
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const modules = process.env.OPERATIVE_UI_NODE_MODULES;
const load = (...path) => import(pathToFileURL(join(modules, ...path)).href);
const { HttpAgent } = await load("@ag-ui", "client", "dist", "index.mjs");
const { EventSchema } = await load("@ag-ui", "core", "dist", "schemas.mjs");

const [url, scenario, text] = process.argv.slice(2);
const warnings = [];
const errors = [];
const originalWarn = console.warn;
const originalError = console.error;
console.warn = (...args) => warnings.push(args.map(String).join(" "));
console.error = (...args) => errors.push(args.map(String).join(" "));

const agent = new HttpAgent({ url, threadId: "thread-node" });
const runs = [];

function subscriber(record) {
  return {
    onEvent({ event }) {
      const checked = EventSchema.safeParse(event);
      record.events.push(event);
      if (!checked.success) record.invalid.push({ type: event.type, issues: checked.error.issues });
    },
    onRunFinishedEvent(params) {
      record.outcome = params.outcome;
      record.interrupts = params.interrupts ?? [];
      record.pendingToolCallIds = params.pendingToolCallIds ?? [];
    },
    onRunErrorEvent({ event }) {
      record.runError = { message: event.message, code: event.code };
    },
  };
}

async function run(parameters = {}, { abortOn } = {}) {
  const record = { events: [], invalid: [] };
  runs.push(record);
  const sub = subscriber(record);
  if (abortOn !== undefined) {
    const onEvent = sub.onEvent;
    sub.onEvent = (params) => {
      onEvent(params);
      if (params.event.type === abortOn) agent.abortRun();
    };
  }
  try {
    const result = await agent.runAgent(parameters, sub);
    record.resolved = true;
    record.newMessages = result.newMessages;
  } catch (error) {
    record.rejected = String(error?.message ?? error);
  }
  return record;
}

function user(text) {
  agent.addMessage({ id: `user-${agent.messages.length}`, role: "user", content: text });
}

const colorTool = {
  name: "choose_color",
  description: "Ask the user to choose a color",
  parameters: {
    type: "object",
    properties: { options: { type: "array", items: { type: "string" } } },
    required: ["options"],
  },
};

if (scenario === "tool") {
  user(text ?? "weather please");
  await run();
} else if (scenario === "reasoning") {
  user("think about the weather");
  await run();
  user("weather please"); // the thread sent back holds the reasoning message
  await run();
} else if (scenario === "approve" || scenario === "deny") {
  user(text ?? "save a note");
  const first = await run();
  const interrupt = agent.pendingInterrupts[0];
  first.pendingInterrupts = agent.pendingInterrupts.length;
  if (interrupt !== undefined) {
    const resume =
      scenario === "approve"
        ? [{ interruptId: interrupt.id, status: "resolved", payload: { approved: true } }]
        : [{ interruptId: interrupt.id, status: "cancelled" }];
    await run({ resume });
    runs[1].pendingInterrupts = agent.pendingInterrupts.length;
  }
} else if (scenario === "frontend") {
  user("pick a color");
  const first = await run({ tools: [colorTool] });
  const [callId] = first.pendingToolCallIds ?? [];
  if (callId !== undefined) {
    agent.addMessage({ id: "tool-answer", role: "tool", toolCallId: callId, content: "blue" });
    await run({ tools: [colorTool] });
  }
} else if (scenario === "error") {
  user("fail now");
  await run();
} else if (scenario === "disconnect") {
  user("hang");
  await run({}, { abortOn: "STEP_STARTED" });
} else {
  throw new Error(`unknown scenario ${scenario}`);
}

console.warn = originalWarn;
console.error = originalError;
process.stdout.write(JSON.stringify({ runs, warnings, errors, messages: agent.messages }) + "\n");
