// ESLint (flat config) for the report page's script, analysis/report/report.js: a plain
// browser script inlined into the HTML report (no modules, no build step). Run by .ci/run,
// which installs eslint, @eslint/js and globals into a temporary directory and points
// NODE_PATH at it (hence CommonJS: require() honours NODE_PATH, import does not).
"use strict";

const js = require("@eslint/js");
const globals = require("globals");

module.exports = [
  {
    files: ["analysis/report/*.js"],
    languageOptions: {
      ecmaVersion: 2020,
      sourceType: "script",
      globals: globals.browser,
    },
    linterOptions: {reportUnusedDisableDirectives: "error"},
    rules: {
      ...js.configs.recommended.rules,
      "no-undef": "error",
      "no-unused-vars": "error",
    },
  },
];
