// A Node.js client of the cascadebreaker sidecar, using only proto/ccb/v1/sidecar.proto, the
// stock grpc-js and the google.rpc protos (third_party/). It shows, and checks, every part of the
// contract a non-Python team needs (docs/contract.md):
//
//   1. the signing test vectors: canonical bytes and HMAC-SHA256 rebuilt in JavaScript;
//   2. Watch: a stream of availability updates, each signature verified;
//   3. Call: a normal call, then calls that trip the upstream's breaker, then a refused call read
//      as the standard rich error (google.rpc.Status with ErrorInfo + RetryInfo);
//   4. Check: the same cause chain as the refusal.
//
//   node client.mjs --target 127.0.0.1:15002 --upstream payment --secret s3cret \
//       [--serving "POST /v1/orders"] [--trip 2] [--vectors ../../proto/ccb/v1/signing-vectors.json]
//
// Each step prints one JSON line; any broken promise exits with status 1.

import { createHmac, timingSafeEqual } from "node:crypto";
import { readFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";

import * as grpc from "@grpc/grpc-js";
import * as protoLoader from "@grpc/proto-loader";
import protobuf from "protobufjs";

const here = path.dirname(fileURLToPath(import.meta.url));
const repo = path.resolve(here, "..", "..");

const { values: args } = parseArgs({
  options: {
    target: { type: "string", default: "127.0.0.1:15002" },
    upstream: { type: "string", default: "payment" },
    secret: { type: "string", default: "" },
    serving: { type: "string", default: "POST /v1/orders" },
    trip: { type: "string", default: "2" },
    vectors: { type: "string", default: path.join(repo, "proto/ccb/v1/signing-vectors.json") },
    proto: { type: "string", default: path.join(repo, "proto") },
  },
});

function report(step, facts) {
  console.log(JSON.stringify({ step, ...facts }));
}

function check(condition, what) {
  if (!condition) throw new Error(`broken promise: ${what}`);
}

// -- canonical bytes (docs/contract.md, "Availability updates and their signatures") ----------

// Integers that may pass 2^53 (version) travel as decimal strings and are written as numbers.
class Raw {
  constructor(digits) {
    this.digits = String(digits);
  }
}

// JSON with keys sorted by code point, no whitespace, raw UTF-8: JSON.stringify escapes exactly
// what the contract's canonical form escapes.
function canonicalJson(value) {
  if (value instanceof Raw) return value.digits;
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value !== null && typeof value === "object") {
    const keys = Object.keys(value).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(value[k])}`).join(",")}}`;
  }
  return JSON.stringify(value);
}

// The canonical object of an update from its JSON wire form.
function canonicalFromJson(update) {
  const body = { ...update };
  delete body.signature;
  body.expiresAt = new Raw(Math.round(update.expiresAt * 1000));
  body.version = new Raw(update.version);
  return canonicalJson(body);
}

// The canonical object of an AvailabilityUpdate message (proto field names, longs as strings).
function canonicalFromProto(message) {
  const body = {
    available: message.available,
    causeChain: message.cause_chain.map((c) => ({
      endpoint: `${c.service} ${c.endpoint}`,
      reason: c.reason,
    })),
    endpoint: `${message.service} ${message.endpoint}`,
    expiresAt: new Raw(message.expires_at_unix_ms),
    service: message.service,
    version: new Raw(message.version),
  };
  if (message.reason) body.reason = message.reason;
  if (message.instance) body.instance = message.instance;
  return canonicalJson(body);
}

function hmacHex(secret, text) {
  return createHmac("sha256", secret).update(Buffer.from(text, "utf8")).digest("hex");
}

function checkVectors() {
  const vectors = JSON.parse(readFileSync(args.vectors, "utf8"));
  let count = 0;
  for (const testCase of vectors.cases) {
    if (testCase.name === "legacy") continue; // the pre-contract form: receivers only
    const canonical = canonicalFromJson(testCase.update);
    check(canonical === testCase.canonical, `canonical bytes of vector ${testCase.name}`);
    check(hmacHex(vectors.secret, canonical) === testCase.signature, `signature of ${testCase.name}`);
    count += 1;
  }
  report("vectors", { ok: true, count });
}

function verifyUpdate(message, secret) {
  if (!secret) return true;
  const expected = createHmac("sha256", secret).update(canonicalFromProto(message), "utf8").digest();
  const got = Buffer.from(message.signature);
  return got.length === expected.length && timingSafeEqual(got, expected);
}

// -- rich errors -------------------------------------------------------------------------------

const rpcRoot = new protobuf.Root();
rpcRoot.resolvePath = (origin, target) =>
  target.startsWith("google/protobuf/")
    ? protobuf.util.path.resolve(origin, target) // bundled with protobufjs
    : path.join(here, "third_party", target);
rpcRoot.loadSync(["google/rpc/status.proto", "google/rpc/error_details.proto"]);
const Status = rpcRoot.lookupType("google.rpc.Status");

// The google.rpc.Status of a failed call: {code, message, errorInfo, retryDelayMs}.
function richError(error) {
  const [raw] = error.metadata?.get("grpc-status-details-bin") ?? [];
  if (!raw) return null;
  const status = Status.decode(raw);
  const facts = { code: status.code, message: status.message, errorInfo: null, retryDelayMs: null };
  for (const detail of status.details) {
    const typeName = detail.type_url.split("/").pop();
    const type = rpcRoot.lookupType(typeName);
    const decoded = type.toObject(type.decode(detail.value), { longs: Number });
    if (typeName === "google.rpc.ErrorInfo") facts.errorInfo = decoded;
    if (typeName === "google.rpc.RetryInfo") {
      const delay = decoded.retryDelay ?? {};
      facts.retryDelayMs = (delay.seconds ?? 0) * 1000 + Math.round((delay.nanos ?? 0) / 1e6);
    }
  }
  return facts;
}

// -- the sidecar -------------------------------------------------------------------------------

const definition = protoLoader.loadSync("ccb/v1/sidecar.proto", {
  includeDirs: [args.proto],
  keepCase: true, // the proto's snake_case field names
  longs: String, // versions pass 2^53
  enums: String,
  defaults: true,
});
const { Sidecar } = grpc.loadPackageDefinition(definition).ccb.v1;
const client = new Sidecar(args.target, grpc.credentials.createInsecure());

const unary = (method, request) =>
  new Promise((resolve, reject) => {
    client[method](request, { deadline: Date.now() + 10_000 }, (error, reply) =>
      error ? reject(error) : resolve(reply),
    );
  });

// Collect Watch updates; resolves `ready` once the stream is established.
function watch() {
  const updates = [];
  const waiters = [];
  const stream = client.Watch({ subscriber_service: "node-example", since_version: "0" });
  const ready = new Promise((resolve) => stream.once("metadata", resolve));
  stream.on("data", (message) => {
    updates.push(message);
    for (const waiter of waiters.splice(0)) waiter();
  });
  stream.on("error", () => {}); // cancelled at the end
  const next = (predicate, timeoutMs) =>
    new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error("no such Watch update in time")), timeoutMs);
      const look = () => {
        const found = updates.find(predicate);
        if (found) {
          clearTimeout(timer);
          resolve(found);
        } else {
          waiters.push(look);
        }
      };
      look();
    });
  return { stream, ready, next };
}

async function main() {
  checkVectors();
  const updates = watch();
  await updates.ready;

  const ok = await unary("Call", {
    upstream: args.upstream,
    method: "GET",
    path: "/v1/ok/1",
    serving_endpoint: args.serving, // teaches the cascade: our endpoint needs the upstream
  });
  check(ok.status === 200, "a healthy call answers 200");
  report("call", { status: ok.status });

  for (let i = 0; i < Number(args.trip); i += 1) {
    const failed = await unary("Call", {
      upstream: args.upstream,
      path: "/status/500",
      serving_endpoint: args.serving,
    });
    check(failed.status === 500, "an upstream 500 is a response, not an error");
  }

  let refusal = null;
  try {
    await unary("Call", { upstream: args.upstream, path: "/v1/ok/2" });
  } catch (error) {
    check(error.code === grpc.status.UNAVAILABLE, "a refused call is UNAVAILABLE");
    refusal = richError(error);
  }
  check(refusal !== null, "the refusal carries grpc-status-details-bin");
  const info = refusal.errorInfo;
  check(info.reason === "CIRCUIT_OPEN" && info.domain === "cascadebreaker", "ErrorInfo reason");
  check(info.metadata.circuitState === "OPEN", "circuitState OPEN");
  check(info.metadata.reasonCode === "circuit_open", "reasonCode circuit_open");
  check(refusal.retryDelayMs > 0, "RetryInfo says when to come back");
  const refusedChain = JSON.parse(info.metadata.causeChain);
  report("refused", {
    reason: info.reason,
    circuitState: info.metadata.circuitState,
    reasonCode: info.metadata.reasonCode,
    retryAfter: Number(info.metadata.retryAfter),
    retryDelayMs: refusal.retryDelayMs,
    causeChain: refusedChain,
  });

  const checked = await unary("Check", { upstream: args.upstream });
  check(!checked.available && checked.circuit_state === "CIRCUIT_STATE_OPEN", "Check says OPEN");
  const checkedChain = checked.cause_chain.map((c) => ({
    endpoint: `${c.service} ${c.endpoint}`,
    reason: c.reason,
  }));
  check(JSON.stringify(checkedChain) === JSON.stringify(refusedChain), "the same cause chain");
  report("check", {
    available: checked.available,
    circuitState: checked.circuit_state,
    retryAfterMs: Number(checked.retry_after_ms),
    causeChain: checkedChain,
  });

  const [method, route] = args.serving.split(" ");
  const down = await updates.next(
    (u) => u.endpoint === `${method} ${route}` && !u.available,
    20_000,
  );
  const verified = verifyUpdate(down, args.secret);
  check(verified, "the update's signature verifies");
  report("watch", {
    endpoint: `${down.service} ${down.endpoint}`,
    available: down.available,
    reason: down.reason,
    causeChain: down.cause_chain.map((c) => `${c.service} ${c.endpoint}`),
    version: down.version,
    signed: down.signature.length === 32,
    verified,
  });

  updates.stream.cancel();
  client.close();
}

main().catch((error) => {
  console.error(error.stack ?? String(error));
  client.close();
  process.exit(1);
});
