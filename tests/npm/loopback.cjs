// Preloaded into reference servers started by the tests (node --require):
// makes every listen() without an explicit host bind 127.0.0.1 only, so test
// servers are never reachable from other hosts.
//
// Binding to a named host is asynchronous in Node, so `address()` right
// after `listen(0)` would say nothing (code that reads the port at once,
// as some conformance scenario servers do, would see port 0): such a
// listen gets a port drawn here, and `address()` answers it until the
// socket is bound.
const net = require("net");
const listen = net.Server.prototype.listen;
const address = net.Server.prototype.address;
net.Server.prototype.listen = function (...args) {
  if (typeof args[0] === "number" || (typeof args[0] === "string" && /^\d+$/.test(args[0]))) {
    if (typeof args[1] !== "string") {
      if (Number(args[0]) === 0) {
        // Below the kernel's ephemeral range, where nothing else binds by chance.
        args[0] = 20000 + Math.floor(Math.random() * 12000);
        this._loopbackPort = args[0];
      }
      args.splice(1, 0, "127.0.0.1");
    }
  }
  return listen.apply(this, args);
};
net.Server.prototype.address = function () {
  const bound = address.call(this);
  if (bound === null && this._loopbackPort !== undefined) {
    return { address: "127.0.0.1", family: "IPv4", port: this._loopbackPort };
  }
  return bound;
};
