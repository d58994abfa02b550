// A minimal useChat page: @ai-sdk/react's hook against operative's /api/chat, bundled by
// esbuild (from npm) in the test. It shows each message's text and tool parts, and
// approve / deny buttons for a call that waits for approval.
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from "ai";
import { useState } from "react";
import { createRoot } from "react-dom/client";

function ToolPart({ part, answer }) {
  const name = part.type === "dynamic-tool" ? part.toolName : part.type.slice("tool-".length);
  const shown = part.state === "output-available" ? part.output : part.input;
  return (
    <div className={`tool ${part.state}`}>
      <b>{name}</b> <code>{JSON.stringify(shown)}</code> <i>{part.state}</i>
      {part.state === "approval-requested" && (
        <span>
          <button className="approve" onClick={() => answer({ id: part.approval.id, approved: true })}>
            Approve
          </button>
          <button
            className="deny"
            onClick={() => answer({ id: part.approval.id, approved: false, reason: "not now" })}
          >
            Deny
          </button>
        </span>
      )}
    </div>
  );
}

function App() {
  const { messages, sendMessage, addToolApprovalResponse, status, error } = useChat({
    transport: new DefaultChatTransport({ api: "/api/chat" }),
    sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
  });
  const [input, setInput] = useState("");
  return (
    <main style={{ fontFamily: "sans-serif", maxWidth: "40em", margin: "1em auto" }}>
      <h1>useChat + operative</h1>
      {messages.map((message) => (
        <div key={message.id} className={`msg ${message.role}`}>
          <b>{message.role}</b>
          {message.parts.map((part, index) =>
            part.type === "text" ? (
              <p key={index} className="text">
                {part.text}
              </p>
            ) : part.type === "dynamic-tool" || part.type.startsWith("tool-") ? (
              <ToolPart key={index} part={part} answer={addToolApprovalResponse} />
            ) : null,
          )}
        </div>
      ))}
      {error && <p id="error">{error.message}</p>}
      <form
        onSubmit={(event) => {
          event.preventDefault();
          sendMessage({ text: input });
          setInput("");
        }}
      >
        <input id="message" value={input} onChange={(event) => setInput(event.target.value)} />
        <button id="send" type="submit">
          Send
        </button>
        <span id="status">{status}</span>
      </form>
    </main>
  );
}

createRoot(document.getElementById("root")).render(<App />);
