// A small, safe Markdown renderer for model output: it builds DOM nodes and sets only
// textContent and a vetted href, never innerHTML, so a "<script>" a model writes is shown as
// text. Covers what chat models write: fenced code, inline code, headings, lists, quotes,
// bold, italic, links; anything else stays plain text. A fence still open (mid-stream) is
// shown as code up to the end.
"use strict";

(() => {
  const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\s][^*\n]*\*)|(\[[^\]\n]+\]\((https?:\/\/[^\s)]+)\))/g;

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // Inline spans of one line of text, appended to parent.
  function inline(parent, text) {
    let last = 0;
    for (const match of text.matchAll(INLINE)) {
      if (match.index > last) parent.append(text.slice(last, match.index));
      const [whole, code, bold, italic, link, href] = match;
      if (code) parent.append(element("code", "", code.slice(1, -1)));
      else if (bold) parent.append(element("strong", "", bold.slice(2, -2)));
      else if (italic) parent.append(element("em", "", italic.slice(1, -1)));
      else if (link) {
        const anchor = element("a", "", link.slice(1, link.indexOf("](")));
        anchor.href = href; // only http(s) gets here: no javascript: URLs
        anchor.rel = "noopener noreferrer";
        anchor.target = "_blank";
        parent.append(anchor);
      } else parent.append(whole);
      last = match.index + whole.length;
    }
    if (last < text.length) parent.append(text.slice(last));
  }

  // Lines of a paragraph, joined with line breaks as the model wrote them.
  function lines(parent, rows) {
    rows.forEach((row, index) => {
      if (index) parent.append(element("br"));
      inline(parent, row);
    });
  }

  function codeBlock(language, code) {
    const block = element("div", "code-block");
    const bar = element("div", "code-bar");
    bar.append(element("span", "code-language", language || "code"));
    const copy = element("button", "copy-code", "Copy");
    copy.type = "button";
    copy.dataset.copyText = code;
    bar.append(copy);
    const pre = element("pre");
    const body = element("code", language ? `language-${language}` : "", code);
    pre.append(body);
    block.append(bar, pre);
    return block;
  }

  function render(text) {
    const fragment = document.createDocumentFragment();
    const rows = text.replace(/\r\n/g, "\n").split("\n");
    let paragraph = [];
    let list = null;
    const flushParagraph = () => {
      if (paragraph.length) {
        const p = element("p");
        lines(p, paragraph);
        fragment.append(p);
      }
      paragraph = [];
    };
    const closeList = () => {
      list = null;
    };
    for (let i = 0; i < rows.length; i++) {
      const row = rows[i];
      const fence = row.match(/^\s*```\s*([\w+#.-]*)\s*$/);
      if (fence) {
        flushParagraph();
        closeList();
        const code = [];
        i += 1;
        while (i < rows.length && !/^\s*```\s*$/.test(rows[i])) code.push(rows[i++]);
        fragment.append(codeBlock(fence[1], code.join("\n")));
        continue;
      }
      const heading = row.match(/^(#{1,6})\s+(.*)$/);
      const bullet = row.match(/^\s*[-*+]\s+(.*)$/);
      const numbered = row.match(/^\s*\d+[.)]\s+(.*)$/);
      const quote = row.match(/^>\s?(.*)$/);
      if (heading) {
        flushParagraph();
        closeList();
        const node = element(`h${Math.min(heading[1].length + 2, 6)}`);
        inline(node, heading[2]);
        fragment.append(node);
      } else if (bullet || numbered) {
        flushParagraph();
        const tag = bullet ? "ul" : "ol";
        if (!list || list.tagName.toLowerCase() !== tag) {
          list = element(tag);
          fragment.append(list);
        }
        const item = element("li");
        inline(item, (bullet || numbered)[1]);
        list.append(item);
      } else if (quote) {
        flushParagraph();
        closeList();
        const node = element("blockquote");
        inline(node, quote[1]);
        fragment.append(node);
      } else if (row.trim() === "") {
        flushParagraph();
        closeList();
      } else {
        closeList();
        paragraph.push(row);
      }
    }
    flushParagraph();
    return fragment;
  }

  window.renderMarkdown = render;
})();
