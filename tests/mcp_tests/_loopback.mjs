// Preloaded into a Node server: every TCP listen binds 127.0.0.1, and the bound port is printed.
import net from "node:net";
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    args.splice(1, typeof args[1] === "string" ? 1 : 0, "127.0.0.1");
  } else if (args[0] && typeof args[0] === "object" && !("path" in args[0])) {
    args[0] = { ...args[0], host: "127.0.0.1" };
  }
  this.once("listening", () => {
    const address = this.address();
    process.stderr.write(`operative-test listening ${address.address}:${address.port}\n`);
  });
  return listen.apply(this, args);
};
