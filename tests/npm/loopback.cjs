// Preloaded into reference servers started by the tests (node --require):
// makes every listen() without an explicit host bind 127.0.0.1 only, so test
// servers are never reachable from other hosts.
const net = require("net");
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== "string") {
      args.splice(1, 0, "127.0.0.1");
    }
  }
  return listen.apply(this, args);
};
