// Preloaded with `node --require ./loopback.cjs` in front of emulators that bind 0.0.0.0 by code
// (kinesis-local, fauxqs): every TCP listen is forced onto 127.0.0.1 so the local stack is never
// reachable from outside this machine.
'use strict';
const net = require('net');
const LOOPBACK = '127.0.0.1';
const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  if (args.length > 0 && args[0] !== null && typeof args[0] === 'object' && !Array.isArray(args[0])) {
    if (args[0].path === undefined && args[0].fd === undefined && args[0]._handle === undefined) {
      args[0] = Object.assign({}, args[0], { host: LOOPBACK });
    }
  } else if (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) {
    if (typeof args[1] === 'string') {
      args[1] = LOOPBACK;
    } else {
      args.splice(1, 0, LOOPBACK);
    }
  }
  return listen.apply(this, args);
};
