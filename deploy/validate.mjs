#!/usr/bin/env node
// Validates Kubernetes manifests offline against the API's OpenAPI schemas: every object of
// a multi-document YAML stream (files named on the command line, else standard input, e.g.
// `helm template loom deploy/helm/loom | node deploy/validate.mjs`) is checked by its
// apiVersion and kind with the npm package kubernetes-models, whose classes carry the
// schemas of the Kubernetes API compiled in (no network, no cluster).
//
// With --json, the objects read are printed to standard output as one JSON array (the
// report goes to standard error), so a test can inspect what it validated.
//
// Exit 0 when every object is valid; 1 when any is invalid, or has an apiVersion/kind
// the package does not know (a typo there would otherwise pass unchecked); 2 when the
// input cannot be read or parsed, or the packages are missing.
//
// The packages (kubernetes-models, yaml) are installed by scripts/tools/install.sh into
// $LOOM_CACHE_DIR/kube (default ~/.cache/loom/kube); LOOM_KUBE_MODELS_DIR overrides that.

import { existsSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const cacheDir = process.env.LOOM_CACHE_DIR || join(homedir(), ".cache", "loom");
const modelsDir = process.env.LOOM_KUBE_MODELS_DIR || join(cacheDir, "kube");
// Resolve yaml (CommonJS) as if from a file in modelsDir: its node_modules, not this repo's.
const require = createRequire(join(modelsDir, "package.json"));

function load(name) {
  try {
    return require(name);
  } catch (err) {
    if (err.code !== "MODULE_NOT_FOUND") throw err;
    return null;
  }
}

const YAML = load("yaml");
const modelsRoot = join(modelsDir, "node_modules", "kubernetes-models");
if (!YAML || !existsSync(join(modelsRoot, "package.json"))) {
  console.error(`validate: npm packages yaml and kubernetes-models not found under ${modelsDir}: run scripts/tools/install.sh`);
  process.exit(2);
}

// The model class of apiVersion/kind: the module kubernetes-models/<group>/<version>/<Kind>
// (an ES module), with the core group ("v1") as kubernetes-models/v1/<Kind>. Null when the
// package has none.
async function modelClass(apiVersion, kind) {
  if (typeof apiVersion !== "string" || typeof kind !== "string") return null;
  if (!/^([a-z0-9.-]+\/)?v[0-9]+((alpha|beta)[0-9]+)?$/.test(apiVersion)) return null;
  if (!/^[A-Z][A-Za-z0-9]*$/.test(kind)) return null;
  const file = join(modelsRoot, ...apiVersion.split("/"), `${kind}.js`);
  if (!existsSync(file)) return null;
  const cls = (await import(pathToFileURL(file).href))[kind];
  // Only top-level API objects (a Model with apiVersion and kind), not nested types
  // (e.g. v1/Container), which have none.
  return typeof cls === "function" && cls.apiVersion === apiVersion && cls.kind === kind
    ? cls
    : null;
}

// A broken install (a dependency missing) must not read as "unknown kind" for everything.
try {
  if (!(await modelClass("v1", "Service"))) throw new Error("v1/Service has no model");
} catch (err) {
  console.error(`validate: kubernetes-models under ${modelsDir} is unusable (${err.message}): run scripts/tools/install.sh`);
  process.exit(2);
}

function describe(err) {
  const details = err && Array.isArray(err.errors)
    ? err.errors.map((e) => `  ${e.instancePath || "/"}: ${e.message}${e.params ? " " + JSON.stringify(e.params) : ""}`)
    : [];
  return [String((err && err.message) || err), ...details].join("\n");
}

const args = process.argv.slice(2);
const json = args.includes("--json");
const sources = args.filter((a) => a !== "--json");
const report = json ? console.error : console.log;
let documents = [];
try {
  const inputs = sources.length
    ? sources.map((f) => [f, readFileSync(f, "utf8")])
    : [["<stdin>", readFileSync(0, "utf8")]];
  for (const [name, text] of inputs) {
    // YAML 1.1, as Kubernetes and Helm read manifests: 0440 is octal (a file mode), not 440.
    for (const doc of YAML.parseAllDocuments(text, { version: "1.1" })) {
      if (doc.errors.length) throw new Error(`${name}: ${doc.errors[0].message}`);
      const obj = doc.toJS();
      if (obj !== null && obj !== undefined) documents.push([name, obj]);
    }
  }
} catch (err) {
  console.error(`validate: ${err.message}`);
  process.exit(2);
}

let failed = 0;
for (const [source, obj] of documents) {
  const name = obj?.metadata?.name;
  const label = `${obj?.apiVersion}/${obj?.kind} ${name ?? "<no name>"}`;
  const Model = await modelClass(obj?.apiVersion, obj?.kind);
  let problem = null;
  if (!Model) {
    problem = "unknown apiVersion/kind (not a Kubernetes API object kubernetes-models knows)";
  } else if (typeof name !== "string" || !/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/.test(name)) {
    problem = "metadata.name missing or not a DNS subdomain name";
  } else {
    try {
      new Model(obj).validate();
    } catch (err) {
      problem = describe(err);
    }
  }
  if (problem) {
    failed += 1;
    console.error(`INVALID ${label} (${source}): ${problem}`);
  } else {
    report(`valid ${label}`);
  }
}
report(`${documents.length - failed} valid, ${failed} invalid`);
if (json) console.log(JSON.stringify(documents.map(([, obj]) => obj)));
process.exit(failed ? 1 : 0);
