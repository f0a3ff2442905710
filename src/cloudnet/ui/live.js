// Live updates: the event log long-polled (GET /v2.0/events?since=N&timeout=S); where the caller may not follow
// it (403: members, before events are opened to them), the lists are read again every few seconds instead.

import { ApiError, get } from "./api.js";

const WAIT = 25; // seconds a long poll may be held
const POLL = 3000; // ms between reads when polling
const RETRY = 3000; // ms before trying again after an error

export class Live {
  /** `onChange(events)` is called after changes (events: [] when polling, where nothing says what changed). */
  constructor(onChange, onMode) {
    this.onChange = onChange;
    this.onMode = onMode || (() => {});
    this.running = false;
    this.controller = null;
    this.mode = "";
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.loop();
  }

  stop() {
    this.running = false;
    if (this.controller) this.controller.abort();
  }

  setMode(mode) {
    if (mode !== this.mode) {
      this.mode = mode;
      this.onMode(mode);
    }
  }

  async pause(ms) {
    await new Promise((resolve) => setTimeout(resolve, ms));
  }

  async loop() {
    let since = null;
    while (this.running) {
      this.controller = new AbortController();
      try {
        if (since === null) {
          since = (await get("/v2.0/events?since=0&limit=1", this.controller.signal)).revision;
          this.setMode("live");
          continue;
        }
        const answer = await get(`/v2.0/events?since=${since}&timeout=${WAIT}`, this.controller.signal);
        this.setMode("live");
        if (answer.events.length) {
          since = answer.events[answer.events.length - 1].revision;
          this.onChange(answer.events);
        } else if (answer.revision < since) {
          since = answer.revision; // the log was reset (a new database): follow from where it is
        }
      } catch (err) {
        if (!this.running) return;
        if (err instanceof ApiError && err.status === 401) {
          this.running = false; // the token expired or was revoked: the page's next read says so, and logs out
          this.onChange([]);
          return;
        }
        if (err instanceof ApiError && err.status === 403) {
          this.setMode("polling");
          await this.pause(POLL);
          if (this.running) this.onChange([]);
        } else {
          this.setMode("reconnecting");
          await this.pause(RETRY);
        }
      }
    }
  }
}
