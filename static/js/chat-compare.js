// Side by side: one ChatColumn (static/js/chat.js) per run, the same prompt sent to each at
// once, answers streaming in parallel; once every column has answered a turn the vote
// buttons mark the better one (POST …/vote/, kept per pair of recipes: the arena page).
(function () {
  "use strict";
  const grid = document.getElementById("compare");
  if (!grid || !window.SparkChat) return;
  const form = document.getElementById("compare-send");
  const voteBox = document.getElementById("compare-vote");
  const voteState = voteBox.querySelector("[data-vote-state]");
  const voteButtons = [...voteBox.querySelectorAll("[data-vote]")];
  const letters = voteBox.dataset.letters;
  const votes = {};
  for (const pair of (grid.dataset.votes || "").trim().split(/\s+/)) {
    const [turn, winner] = pair.split(":");
    if (turn) votes[turn] = winner === "tie" ? "tie" : letters[Number(winner)];
  }
  let turn = Number(grid.dataset.turns || 0);
  let running = 0;

  const csrf = () => {
    const input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  };

  function showVote() {
    const ready = running === 0 && turn > 0;
    voteButtons.forEach((b) => {
      b.disabled = !ready;
      b.classList.toggle("chosen", votes[turn] === b.dataset.vote);
    });
    if (!turn) voteState.textContent = "Send a prompt first.";
    else if (running) voteState.textContent = `Turn ${turn}: answering…`;
    else if (votes[turn]) {
      // The vote in the button's own words ("B is better", "Tie": apps/chat/sides.py).
      const chosen = voteButtons.find((b) => b.dataset.vote === votes[turn]);
      voteState.textContent = `Turn ${turn}: you voted ${chosen ? chosen.textContent : votes[turn]} (you can change it)`;
    }
    else voteState.textContent = `Turn ${turn}: which answer is better?`;
  }

  const stateEl = form && form.querySelector("[data-chat-state]");
  const stopButton = form && form.querySelector("[data-stop]");
  const sendButton = form && form.querySelector("button[type=submit]");
  const textarea = form && form.querySelector("textarea");
  const setState = (text) => { if (stateEl) stateEl.textContent = text; };

  const columns = [...grid.querySelectorAll(".chat-log[data-compare]")].map((log) => {
    const label = log.closest(".compare-col").querySelector("[data-col-state]");
    return new window.SparkChat.ChatColumn(log, log.dataset.ws || null, {
      writable: false,
      onOpen: () => { label.textContent = ""; if (columns.every((c) => c.open)) setState("ready"); },
      onState: (text) => { label.textContent = "· " + text; },
      onStart: () => { running += 1; busy(); },
      onDone: () => { running = Math.max(0, running - 1); busy(); },
    });
  });

  function busy() {
    if (stopButton) stopButton.hidden = running === 0;
    if (sendButton) sendButton.disabled = running > 0 || (textarea && textarea.disabled);
    setState(running ? "answering…" : "ready");
    showVote();
  }

  if (form) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const content = textarea.value;
      if (!content.trim() || running) return;
      if (!columns.every((c) => c.open)) { setState("not every column is connected yet"); return; }
      columns.forEach((c) => c.send({ type: "send", content }));
      turn += 1;
      textarea.value = "";
      showVote();
    });
    textarea.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) form.requestSubmit();
    });
    stopButton.addEventListener("click", () => columns.forEach((c) => c.stop()));
    columns.forEach((c) => { if (c.wsPath) c.connect(); });
  }

  voteButtons.forEach((b) => b.addEventListener("click", () => {
    const body = new URLSearchParams({ turn: String(turn), winner: b.dataset.vote });
    fetch(grid.dataset.voteUrl, {
      method: "POST", credentials: "same-origin", body,
      headers: { "X-CSRFToken": csrf() },
    })
      .then((r) => r.json().then((data) => ({ ok: r.ok, data })))
      .then(({ ok, data }) => {
        if (!ok) { voteState.textContent = data.error || "the vote was not saved"; return; }
        votes[data.turn] = data.winner;
        showVote();
      })
      .catch(() => { voteState.textContent = "the vote was not saved (network)"; });
  }));
  showVote();
})();
