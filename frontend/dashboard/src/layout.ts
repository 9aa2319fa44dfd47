// Lays the graph out with ELK (layered, left to right: callers before their upstreams).
// Services are boxes holding their endpoints; edges join endpoints, or services where only a
// breaker (no learned edge) joins them. Positions come back absolute, ready for SVG.
import ELK from "elkjs/lib/elk.bundled.js";
import type { ElkExtendedEdge, ElkNode } from "elkjs/lib/elk.bundled.js";
import type { Picture } from "./types";

const elk = new ELK();

export const HEADER = 30; // room for the service's name at the top of its box
const ENDPOINT_HEIGHT = 24;
const CHAR_WIDTH = 7.2; // 12px monospace

export interface Box {
  x: number;
  y: number;
  width: number;
  height: number;
}

export interface RoutedEdge {
  id: string;
  points: { x: number; y: number }[];
}

export interface Layout {
  width: number;
  height: number;
  services: Map<string, Box>;
  endpoints: Map<string, Box>; // absolute positions
  edges: Map<string, RoutedEdge>;
}

export const serviceNode = (name: string) => `svc:${name}`;
export const endpointNode = (id: string) => `ep:${id}`;
export const edgeId = (caller: string, callee: string) => `edge:${caller}->${callee}`;
export const linkId = (service: string, upstream: string) => `link:${service}->${upstream}`;

/** Room for the name and a badge ("unavailable", "fault: down") beside it. */
const serviceWidth = (name: string) => Math.max(170, name.length * 9 + 110);

/** Breakers between services that no learned endpoint edge already joins. */
export function serviceLinks(picture: Picture): { service: string; upstream: string }[] {
  const joined = new Set(
    picture.edges.map((e) => `${e.caller.split(" ")[0]}->${e.callee.split(" ")[0]}`),
  );
  return picture.breakers
    .filter((b) => !joined.has(`${b.service}->${b.upstream}`))
    .map((b) => ({ service: b.service, upstream: b.upstream }));
}

/** What decides the layout: when it is unchanged, the old layout is kept. */
export function structureKey(picture: Picture): string {
  const services = picture.services.map((s) => `${s.name}[${s.endpoints.map((e) => e.id)}]`);
  const edges = picture.edges.map((e) => edgeId(e.caller, e.callee));
  const links = serviceLinks(picture).map((l) => linkId(l.service, l.upstream));
  return JSON.stringify([services, edges, links]);
}

export async function layout(picture: Picture): Promise<Layout> {
  const known = new Set(picture.services.flatMap((s) => s.endpoints.map((e) => e.id)));
  const edges: ElkExtendedEdge[] = picture.edges
    .filter((e) => known.has(e.caller) && known.has(e.callee))
    .map((e) => ({
      id: edgeId(e.caller, e.callee),
      sources: [endpointNode(e.caller)],
      targets: [endpointNode(e.callee)],
    }));
  for (const l of serviceLinks(picture)) {
    edges.push({
      id: linkId(l.service, l.upstream),
      sources: [serviceNode(l.service)],
      targets: [serviceNode(l.upstream)],
    });
  }
  const graph: ElkNode = {
    id: "root",
    layoutOptions: {
      "elk.algorithm": "layered",
      "elk.direction": "RIGHT",
      "elk.hierarchyHandling": "INCLUDE_CHILDREN",
      "elk.edgeRouting": "ORTHOGONAL",
      "elk.layered.spacing.nodeNodeBetweenLayers": "56",
      "elk.spacing.nodeNode": "22",
      "elk.spacing.edgeNode": "14",
      "elk.padding": "[top=12,left=12,bottom=12,right=12]",
      "elk.json.edgeCoords": "ROOT", // every edge in page coordinates, wherever it is held
    },
    children: picture.services.map((s) => ({
      id: serviceNode(s.name),
      layoutOptions: {
        "elk.padding": `[top=${HEADER + 6},left=10,bottom=10,right=10]`,
        "elk.nodeSize.constraints": "MINIMUM_SIZE",
        "elk.nodeSize.minimum": `(${serviceWidth(s.name)},56)`,
        "elk.spacing.nodeNode": "8",
      },
      width: serviceWidth(s.name),
      height: 56,
      children: s.endpoints.map((e) => ({
        id: endpointNode(e.id),
        width: Math.max(120, e.name.length * CHAR_WIDTH + 20),
        height: ENDPOINT_HEIGHT,
      })),
    })),
    edges,
  };
  const laid = await elk.layout(graph);
  const result: Layout = {
    width: laid.width ?? 0,
    height: laid.height ?? 0,
    services: new Map(),
    endpoints: new Map(),
    edges: new Map(),
  };
  for (const node of laid.children ?? []) {
    const box = { x: node.x ?? 0, y: node.y ?? 0, width: node.width ?? 0, height: node.height ?? 0 };
    result.services.set(node.id, box);
    for (const child of node.children ?? []) {
      result.endpoints.set(child.id, {
        x: box.x + (child.x ?? 0),
        y: box.y + (child.y ?? 0),
        width: child.width ?? 0,
        height: child.height ?? 0,
      });
    }
  }
  for (const edge of laid.edges ?? []) {
    const points = (edge.sections ?? []).flatMap((s) => [
      s.startPoint,
      ...(s.bendPoints ?? []),
      s.endPoint,
    ]);
    result.edges.set(edge.id, { id: edge.id, points });
  }
  return result;
}
