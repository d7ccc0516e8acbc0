// Records which sources the committed bundle was built from: ../static/app/sources.json holds a SHA-256 over
// the files below (path, NUL, bytes, NUL, in path order). tests/unit/test_page_bundle.py recomputes it and
// fails when a source changed without `npm run build` (the bundle is then older than its source).
import { createHash } from "node:crypto";
import { readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative, sep } from "node:path";

const root = new URL(".", import.meta.url).pathname;
const TOP = ["package.json", "package-lock.json", "tsconfig.json", "vite.config.ts"];

function walk(dir) {
  return readdirSync(dir).flatMap((name) => {
    const path = join(dir, name);
    return statSync(path).isDirectory() ? walk(path) : [path];
  });
}

const files = [...TOP.map((name) => join(root, name)), ...walk(join(root, "src"))]
  .map((path) => relative(root, path).split(sep).join("/"))
  .sort();
const hash = createHash("sha256");
for (const name of files) {
  hash.update(name + "\0");
  hash.update(readFileSync(join(root, name)));
  hash.update("\0");
}
const record = { sha256: hash.digest("hex"), files };
writeFileSync(join(root, "../static/app/sources.json"), JSON.stringify(record, null, 1) + "\n");
console.log(`sources.json: ${record.sha256} over ${files.length} files`);
