// Renders e-mails with mailgen (npm, Apache-2.0), the way a Node service sends them.
// stdin: {"modules": "<node_modules dir>", "emails": [{"theme", "product", "body"}, ...]}
// stdout: a JSON array of HTML bodies, in order. Used by loadtest/corpora/mailgen_templates.py.
"use strict";

const chunks = [];
process.stdin.on("data", (c) => chunks.push(c));
process.stdin.on("end", () => {
  const request = JSON.parse(Buffer.concat(chunks).toString("utf8"));
  const Mailgen = require(request.modules + "/mailgen");
  const generators = new Map();
  const out = request.emails.map((e) => {
    const key = e.theme + "\u0000" + JSON.stringify(e.product);
    if (!generators.has(key)) {
      generators.set(key, new Mailgen({ theme: e.theme, product: e.product }));
    }
    return generators.get(key).generate({ body: e.body });
  });
  process.stdout.write(JSON.stringify(out));
});
