// The document `ccb dashboard` sends (GET /api/picture, SSE event `picture`).

export type Availability = "available" | "unavailable" | "unreachable";
export type BreakerState = "CLOSED" | "OPEN" | "HALF_OPEN";

export interface Link {
  endpoint: string; // "service METHOD /route"; "service * *" is the whole service
  service: string;
  reason: string;
}

export interface UpdateRecord {
  at: number; // unix seconds
  via: "watch" | "redis";
  service: string;
  endpoint: string;
  available: boolean;
  version: number;
  root: string | null;
}

export interface Endpoint {
  id: string;
  service: string;
  name: string; // "METHOD /route"
  available: boolean;
  causeChain: Link[];
  expiresAt: number | null;
  replicas: { unavailable: number; of: number } | null;
  updates: UpdateRecord[];
}

export interface SidecarInfo {
  adminUrl: string;
  reachable: boolean | null;
  error: string;
  stream: "none" | "connecting" | "open" | "lost";
}

export interface Service {
  name: string;
  availability: Availability;
  causeChain: Link[];
  sidecars: SidecarInfo[];
  endpoints: Endpoint[];
  fault: string | null;
}

export interface Edge {
  caller: string;
  callee: string;
  required: boolean;
  available: boolean;
}

export interface Rates {
  calls: number;
  failures: number;
  rejected: number;
}

export interface Breaker {
  service: string;
  upstream: string;
  state: BreakerState;
  retryAfter: number;
  rates: Rates | null;
  errorPercent: number | null;
  totals: Rates;
  instances: number;
  openInstances: number;
  inferred: boolean;
  stale: boolean;
}

export interface TimelineEntry {
  at: number;
  kind: "update" | "breaker" | "availability" | "sidecar" | "fault";
  service: string;
  text: string;
  endpoint: string | null;
}

export interface Picture {
  at: number;
  version: number;
  services: Service[];
  edges: Edge[];
  breakers: Breaker[];
  faults: { service: string; fault: string }[];
  timeline: TimelineEntry[];
  redis: "none" | "connecting" | "open" | "lost";
  pacing: { interval: number; minGap: number };
}
