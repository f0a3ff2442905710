// Live updates: the event log long-polled (GET /v2.0/events?since=N&timeout=S); where the caller may not follow
// it (403: members, before events are opened to them), the lists are read again every few seconds instead.

import { ApiError, get } from "./api.js";

const WAIT = 25; // seconds a long poll may be held
const POLL = 3000; // ms between reads when polling
const RETRY = 3000; // ms before trying again after an error

export class Live {
  /** `onChange()` is called after changes; `onMode(mode)` when the mode shown changes ("live", "polling",
   * "reconnecting", "" when stopped). */
  constructor(onChange, onMode) {
    this.onChange = onChange;
    this.onMode = onMode || (() => {});
    this.running = false;
    this.runs = 0; // the loop of an earlier start() sees a newer number and ends, even if it was paused meanwhile
    this.controller = null;
    this.wake = null; // ends the pause under way
    this.mode = "";
  }

  start() {
    if (this.running) return;
    this.running = true;
    this.loop(++this.runs);
  }

  stop() {
    this.running = false;
    this.runs++;
    if (this.controller) this.controller.abort();
    if (this.wake) this.wake();
    this.setMode("");
  }

  setMode(mode) {
    if (mode !== this.mode) {
      this.mode = mode;
      this.onMode(mode);
    }
  }

  /** Wait `ms`, or less if stop() is called meanwhile. */
  pause(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(resolve, ms);
      this.wake = () => {
        clearTimeout(timer);
        resolve();
      };
    });
  }

  async loop(run) {
    const current = () => this.running && run === this.runs;
    let since = null;
    while (current()) {
      this.controller = new AbortController();
      try {
        if (since === null) {
          since = (await get("/v2.0/events?since=0&limit=1", this.controller.signal)).revision;
          if (!current()) return; // stopped while the answer was on its way
          this.setMode("live");
          continue;
        }
        const answer = await get(`/v2.0/events?since=${since}&timeout=${WAIT}`, this.controller.signal);
        if (!current()) return;
        this.setMode("live");
        if (answer.events.length) {
          since = answer.events[answer.events.length - 1].revision;
          this.onChange();
        } else if (answer.revision < since) {
          since = answer.revision; // the log was reset (a new database): follow from where it is
        }
      } catch (err) {
        if (!current()) return;
        if (err instanceof ApiError && err.status === 401) {
          this.running = false; // the token expired or was revoked: the page's next read says so, and logs out
          this.onChange();
          return;
        }
        if (err instanceof ApiError && err.status === 403) {
          this.setMode("polling"); // nothing says what changed: the page is read again
          await this.pause(POLL);
          if (current()) this.onChange();
        } else {
          this.setMode("reconnecting");
          await this.pause(RETRY);
        }
      }
    }
  }
}
