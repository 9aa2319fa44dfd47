// The live picture: one EventSource to /api/events. The browser reconnects by itself after a
// lost stream (the server asks for 1 s); every event carries the whole picture, so a
// reconnected page is current at once.
import { ref, shallowRef } from "vue";
import type { Picture } from "./types";

export const picture = shallowRef<Picture | null>(null);
export const connected = ref(false);

export function connect(url = "api/events"): EventSource {
  const source = new EventSource(url);
  source.addEventListener("open", () => {
    connected.value = true;
  });
  source.addEventListener("error", () => {
    connected.value = false; // EventSource retries on its own
  });
  source.addEventListener("picture", (event) => {
    picture.value = JSON.parse((event as MessageEvent<string>).data) as Picture;
    connected.value = true;
  });
  return source;
}
