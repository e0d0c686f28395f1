// SparkPanel's Markdown for model output: markdown-it with raw HTML off, then DOMPurify
// with an allowlist, then the panel's own chrome (a copy button on code blocks). Nothing a
// model writes can run here or fetch anything:
//  - raw HTML in the text is escaped by markdown-it (html: false) and shown as text;
//  - a link is kept only for http:, https: and mailto: (javascript:, data:, vbscript:,
//    file:, relative and other schemes stay text); it opens in a new tab with no referrer;
//  - an image is never loaded: ![alt](url) becomes a link "image: alt";
//  - math ($…$, \(…\), $$…$$, \[…\]) is turned into MathML by Temml with trust off (no
//    \href, \url, \includegraphics, \html…), its colours and backgrounds dropped; Temml's
//    style attributes never reach an HTML parser (the CSP would refuse each one): its few
//    layout styles become md-tml-* classes (static/css/sparkpanel.css), the rest go;
//  - DOMPurify then keeps only ALLOWED_TAGS and ALLOWED_ATTR (no style, no event
//    handlers, no id), and classes only for code languages, highlight.js, alignment and
//    Temml's layout.
// Streaming (MarkdownStream): finished top-level blocks are rendered once and appended;
// only the block still being written is re-rendered as chunks arrive, so what is above it
// never re-flows. Vendored libraries and their licences: static/vendor/.
(function () {
  "use strict";
  if (!window.markdownit || !window.DOMPurify) return;

  const ALLOWED_TAGS = [
    "p", "br", "hr", "h1", "h2", "h3", "h4", "h5", "h6", "ul", "ol", "li", "blockquote",
    "pre", "code", "em", "strong", "s", "a", "table", "thead", "tbody", "tr", "th", "td",
    "span",
  ];
  // MathML as Temml writes it (layout only: no colour, background or link attribute).
  const MATH_TAGS = [
    "math", "mrow", "mi", "mo", "mn", "ms", "mtext", "mspace", "msup", "msub", "msubsup",
    "mfrac", "msqrt", "mroot", "mover", "munder", "munderover", "mtable", "mtr", "mtd",
    "mlabeledtr", "mstyle", "mpadded", "mphantom", "menclose", "mmultiscripts",
    "mprescripts", "none", "semantics",
  ];
  const MATH_ATTR = [
    "display", "displaystyle", "scriptlevel", "mathvariant", "stretchy", "fence", "form",
    "separator", "lspace", "rspace", "movablelimits", "accent", "accentunder", "largeop",
    "symmetric", "minsize", "maxsize", "width", "linethickness", "notation", "columnalign",
    "rowalign", "columnspacing", "rowspacing", "columnlines", "rowlines", "frame",
    "framespacing", "voffset", "columnspan", "rowspan",
  ];
  const ALLOWED_ATTR = ["href", "title", "class", "start", ...MATH_ATTR];
  const SAFE_URL = /^(?:https?:|mailto:)/i;
  const SAFE_CLASS = /^(?:language-[\w#+.-]{1,40}|hljs(?:-[\w-]{1,40})?|md-align-(?:left|center|right)|md-image|md-math(?:-block|-error)?|(?:md-)?tml-[\w-]{1,40})$/;
  // Values of the attributes that are not addresses: lengths, keywords, numbers.
  const SAFE_VALUE = /^[\w .#%+-]{0,80}$/;
  const MAX_MATH_CHARS = 4000;
  const hljs = window.hljs;
  const temml = window.temml;

  const md = window.markdownit({
    html: false,
    linkify: true,
    typographer: false,
    highlight(code, lang) {
      if (!hljs || !lang || !hljs.getLanguage(lang)) return "";
      try {
        return hljs.highlight(code, { language: lang, ignoreIllegals: true }).value;
      } catch (e) {
        return "";
      }
    },
  });
  md.validateLink = (url) => SAFE_URL.test(url.trim());
  // Images become links: nothing is fetched unless someone clicks.
  md.renderer.rules.image = (tokens, idx, options, env, self) => {
    const token = tokens[idx];
    const src = token.attrGet("src") || "";
    const alt = self.renderInlineAsText(token.children || [], options, env);
    const label = md.utils.escapeHtml("image: " + (alt || src));
    if (!SAFE_URL.test(src)) return label;
    return `<a class="md-image" href="${md.utils.escapeHtml(src)}">${label}</a>`;
  };
  // Table alignment as classes: the panel's CSP allows no inline style.
  md.core.ruler.push("align_classes", (state) => {
    for (const token of state.tokens) {
      const style = token.attrGet && token.attrGet("style");
      if (!style) continue;
      const m = /text-align:(left|center|right)/.exec(style);
      token.attrs = token.attrs.filter(([name]) => name !== "style");
      if (m) token.attrJoin("class", "md-align-" + m[1]);
    }
  });

  if (temml) mathPlugin(md);

  const purifier = window.DOMPurify;
  purifier.addHook("uponSanitizeAttribute", (node, data) => {
    if (data.attrName === "class") {
      const kept = data.attrValue.split(/\s+/).filter((c) => SAFE_CLASS.test(c));
      data.attrValue = kept.join(" ");
      if (!kept.length) data.keepAttr = false;
    }
  });
  purifier.addHook("uponSanitizeAttribute", (node, data) => {
    if (MATH_ATTR.includes(data.attrName) && !SAFE_VALUE.test(data.attrValue)) data.keepAttr = false;
  });
  purifier.addHook("afterSanitizeAttributes", (node) => {
    if (node.tagName === "A") {
      if (!SAFE_URL.test(node.getAttribute("href") || "")) {
        node.removeAttribute("href");
      } else {
        node.setAttribute("target", "_blank");
        node.setAttribute("rel", "noopener noreferrer nofollow");
      }
    }
  });
  const PURIFY = {
    ALLOWED_TAGS: [...ALLOWED_TAGS, ...MATH_TAGS], ALLOWED_ATTR: [...ALLOWED_ATTR, "target", "rel"],
    // The URI pattern applies to every attribute not declared URI-safe: these are not
    // addresses (their values are held to SAFE_VALUE above).
    ALLOWED_URI_REGEXP: SAFE_URL, ADD_URI_SAFE_ATTR: ["start", ...MATH_ATTR],
    ALLOW_DATA_ATTR: false, ALLOW_ARIA_ATTR: false,
    RETURN_DOM_FRAGMENT: true,
  };

  function toFragment(text) {
    return purifier.sanitize(md.render(text), PURIFY);
  }

  // The panel's own chrome around a code block: its language and a copy button.
  function decorate(root) {
    for (const pre of root.querySelectorAll("pre")) {
      if (pre.parentElement && pre.parentElement.classList.contains("md-code")) continue;
      const code = pre.querySelector("code");
      const box = document.createElement("div");
      box.className = "md-code";
      const head = document.createElement("div");
      head.className = "md-code-head";
      const lang = code && /(?:^|\s)language-([\w#+.-]+)/.exec(code.className);
      const label = document.createElement("span");
      label.textContent = lang ? lang[1] : "text";
      const copy = document.createElement("button");
      copy.type = "button";
      copy.className = "md-copy";
      copy.textContent = "Copy";
      // static/js/copy.js (every page loads it): the clipboard, or a hidden textarea on
      // plain http
      copy.addEventListener("click", () => window.SparkPanel.copyText((code || pre).textContent, copy));
      head.append(label, copy);
      pre.replaceWith(box);
      box.append(head, pre);
    }
    return root;
  }

  function render(text) {
    return decorate(toFragment(text));
  }

  // Top-level blocks of `src`: [first line, end line) of each, in order.
  function blocks(src) {
    const out = [];
    for (const token of md.parse(src, {})) {
      if (token.level === 0 && token.nesting !== -1 && token.map) out.push(token.map);
    }
    return out;
  }

  class MarkdownStream {
    // Renders a growing text into `el`: finished blocks once each, the last one anew.
    constructor(el) {
      this.el = el;
      this.text = "";
      this.done = 0; // lines of this.text rendered for good
      this.html = []; // the sources of the committed parts, to check the end against
      this.tail = document.createElement("div");
      this.tail.className = "md-part md-tail";
      el.replaceChildren(this.tail);
      this.frame = null;
    }

    update(text) {
      this.text = text;
      if (this.frame === null) {
        this.frame = requestAnimationFrame(() => { this.frame = null; this.flush(); });
      }
    }

    flush() {
      const lines = this.text.split("\n");
      let rest = lines.slice(this.done);
      const found = blocks(rest.join("\n"));
      // The tail starts at the last block; while that block's first line is unfinished it
      // may yet join the block before ("2" can become "2. item" of the list above), so
      // then the tail starts one block earlier. Everything before the tail is final.
      let first = found.length - 1;
      if (first >= 0 && found[first][0] >= rest.length - 1) first -= 1;
      const start = first >= 1 ? found[first][0] : 0;
      if (start > 0) {
        const part = document.createElement("div");
        part.className = "md-part";
        const source = rest.slice(0, start).join("\n");
        part.append(render(source));
        this.tail.before(part);
        this.html.push(source);
        this.done += start;
        rest = rest.slice(start);
      }
      this.tail.replaceChildren(render(rest.join("\n")));
    }

    finish(text) {
      if (this.frame !== null) cancelAnimationFrame(this.frame);
      this.frame = null;
      this.text = text;
      this.flush();
      // A rare construct (a link reference defined below its use) renders differently in
      // parts: then, and only then, the message is rendered again as a whole.
      const whole = md.render(text);
      const parts = [...this.html, text.split("\n").slice(this.done).join("\n")];
      if (parts.map((p) => md.render(p)).join("") !== whole) {
        this.el.replaceChildren(render(text));
      }
    }
  }

  // --- math: $…$ and \(…\) inline, $$…$$ and \[…\] as blocks, by Temml ----------------
  function mathHtml(tex, display) {
    if (tex.length > MAX_MATH_CHARS) throw new Error("too long");
    return unstyle(temml.renderToString(tex, {
      displayMode: display, trust: false, throwOnError: true, maxSize: 20, maxExpand: 500,
    }));
  }

  // Temml writes part of its layout as style attributes: display math's <math> carries
  // "display:block math", an accent's <mo> "math-depth:0", a matrix's or an alignment's
  // <mtd> its column padding, an array's rules borders, \boxed a padding and a border,
  // \color a colour. The panel's CSP (style-src 'self', no 'unsafe-inline') refuses every
  // style attribute the moment an HTML parser meets it — DOMPurify's own DOMParser
  // included, before any of its hooks runs — and reports a violation. So they are taken
  // out of Temml's markup while it is still a string: the layout ones become classes
  // (static/css/sparkpanel.css, .md-tml-*; text-align as Temml's own tml-left/right), the
  // rest (colours, free-form offsets, \hspace margins, transforms) are dropped, as
  // DOMPurify dropped every style before. Temml escapes & < > " ' in attribute values and
  // text, so a tag is always <name …> with "-quoted values, and no text can look like one.
  const TEMML_STYLE_CLASSES = (() => {
    const map = {
      // Chromium centres display math only with "block math" (Temml-Local.css says block)
      "display:block math": "md-tml-block-math",
      "math-depth:0": "md-tml-depth-0", // an accent at full size
      "text-align:left": "tml-left", "text-align:right": "tml-right",
      "width:100%": "md-tml-w-full", "width:50%": "md-tml-w-half", // \tag'ed equations
      "padding:0": "md-tml-p-0", "padding-top:0": "md-tml-pt-0", "padding-bottom:0": "md-tml-pb-0",
      "padding:3pt": "md-tml-p-box", "border:1px solid": "md-tml-b-box", // \boxed
      "font-weight:bold": "md-tml-bold", // \boldsymbol
    };
    // Column padding: 0, \smallmatrix's 0.1389em, CD's 0.25em, 0.4em, cases' and aligned's
    // 1em, and the arrays' and matrices' \arraycolsep (5pt = 5.9776pt as Temml writes it).
    const pads = { "0": "0", "0em": "0", "0pt": "0", "0.1389em": "small", "0.25em": "cd",
                   "0.4em": "std", "1em": "1em", "5.9776pt": "col" };
    for (const [value, key] of Object.entries(pads)) {
      map["padding-left:" + value] = "md-tml-pl-" + key;
      map["padding-right:" + value] = "md-tml-pr-" + key;
    }
    // An array's rules: | and : between columns, \hline and \hdashline, = double.
    for (const side of ["top", "bottom", "left", "right"]) {
      for (const [value, key] of [["0.06em solid", "solid"], ["0.06em dashed", "dashed"],
                                  ["0.15em double", "double"]]) {
        map[`border-${side}:${value}`] = `md-tml-b${side[0]}-${key}`;
      }
    }
    return map;
  })();

  function unstyle(markup) {
    return markup.replace(/<([a-z][a-z0-9]*)(\s[^<>]*)?>/g, (tag, name, attrs) => {
      if (!attrs || !/\sstyle="/.test(attrs)) return tag;
      const classes = [];
      let rest = attrs.replace(/\sstyle="([^"]*)"/g, (_, css) => {
        for (const declaration of css.split(";")) {
          const at = declaration.indexOf(":");
          if (at < 0) continue;
          const key = declaration.slice(0, at).trim().toLowerCase() + ":" +
            declaration.slice(at + 1).trim().replace(/\s+/g, " ");
          const cls = TEMML_STYLE_CLASSES[key];
          if (cls && !classes.includes(cls)) classes.push(cls);
        }
        return "";
      });
      if (classes.length) {
        const named = /\sclass="([^"]*)"/.exec(rest);
        rest = named
          ? rest.replace(named[0], () => ` class="${named[1]} ${classes.join(" ")}"`)
          : ` class="${classes.join(" ")}"${rest}`;
      }
      return `<${name}${rest}>`;
    });
  }

  function mathPlugin(markdown) {
    const escape = markdown.utils.escapeHtml;
    const render = (tex, display) => {
      const kind = display ? "md-math-block" : "md-math";
      try {
        return `<span class="${kind}">${mathHtml(tex, display)}</span>`;
      } catch (e) {
        // Not TeX after all (or too big): shown as written.
        const fence = display ? ["$$", "$$"] : ["$", "$"];
        return `<code class="md-math-error">${escape(fence[0] + tex + fence[1])}</code>`;
      }
    };
    markdown.inline.ruler.before("escape", "math_inline", (state, silent) => {
      const src = state.src;
      const at = state.pos;
      let open, close;
      if (src.startsWith("\\(", at)) { open = "\\("; close = "\\)"; }
      else if (src[at] === "$" && src[at + 1] !== "$") { open = "$"; close = "$"; }
      else return false;
      const from = at + open.length;
      if (open === "$" && (from >= src.length || /\s/.test(src[from]))) return false;
      let end = src.indexOf(close, from);
      while (end !== -1 && open === "$" && (src[end - 1] === "\\" || /\s/.test(src[end - 1]) || /\d/.test(src[end + 1] || ""))) {
        end = src.indexOf(close, end + 1);
      }
      if (end === -1 || end === from) return false;
      if (!silent) {
        const token = state.push("math_inline", "math", 0);
        token.content = src.slice(from, end);
      }
      state.pos = end + close.length;
      return true;
    });
    markdown.block.ruler.before("fence", "math_block", (state, startLine, endLine, silent) => {
      const begin = state.bMarks[startLine] + state.tShift[startLine];
      const first = state.src.slice(begin, state.eMarks[startLine]);
      const open = first.startsWith("$$") ? "$$" : first.startsWith("\\[") ? "\\[" : null;
      if (!open || state.sCount[startLine] - state.blkIndent >= 4) return false;
      const close = open === "$$" ? "$$" : "\\]";
      let body = first.slice(open.length);
      let line = startLine;
      let found = body.trimEnd().endsWith(close) && body.trim().length >= close.length;
      if (found) body = body.trimEnd().slice(0, -close.length);
      while (!found && ++line < endLine) {
        const text = state.src.slice(state.bMarks[line] + state.tShift[line], state.eMarks[line]);
        if (text.trimEnd().endsWith(close)) {
          body += "\n" + text.trimEnd().slice(0, -close.length);
          found = true;
        } else {
          body += "\n" + text;
        }
      }
      if (!found) return false; // unclosed: still being written, or not math
      if (silent) return true;
      const token = state.push("math_block", "math", 0);
      token.block = true;
      token.content = body.trim();
      token.map = [startLine, line + 1];
      state.line = line + 1;
      return true;
    }, { alt: ["paragraph", "reference", "blockquote", "list"] });
    markdown.renderer.rules.math_inline = (tokens, idx) => render(tokens[idx].content, false);
    markdown.renderer.rules.math_block = (tokens, idx) => `<p>${render(tokens[idx].content, true)}</p>\n`;
  }

  window.SparkMarkdown = { render, MarkdownStream, ALLOWED_TAGS, MATH_TAGS };
})();
