// Copy buttons: a <button data-copy> copies the text of the <pre> beside it (the
// command boxes, templates/core/partials/command.html). One delegated listener, so boxes
// that HTMX swaps in (the wizard's steps) work too. Plain http on a LAN has no
// navigator.clipboard: then the text is copied through a hidden textarea.
// `SparkPanel.copyText(text, button)` is the same for other scripts (markdown.js' code
// blocks).
(function () {
  "use strict";

  function fallbackCopy(text) {
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    let ok = false;
    try { ok = document.execCommand("copy"); } catch (e) { ok = false; }
    area.remove();
    return ok;
  }

  function said(button, words) {
    button.textContent = words;
    setTimeout(() => { button.textContent = "Copy"; }, 1500);
  }

  function copy(text, button) {
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        () => said(button, "Copied"),
        () => said(button, fallbackCopy(text) ? "Copied" : "Select and copy"),
      );
    } else {
      said(button, fallbackCopy(text) ? "Copied" : "Select and copy");
    }
  }

  window.SparkPanel = Object.assign(window.SparkPanel || {}, { copyText: copy });

  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-copy]");
    if (!button) return;
    const box = button.closest(".command-box");
    const source = box && box.querySelector("pre");
    if (source) copy(source.textContent, button);
  });
})();
