// Package doccheck keeps the repository's documentation true to the repository. It holds no
// code for the program: its test reads README.md and docs/*.md and fails when
//
//   - a relative link or image (`[text](path)`, `[text](path#anchor)`, `[text](#anchor)`) points
//     to a file that does not exist, or to a heading anchor the target file does not have
//     (anchors are made from headings as GitHub makes them);
//   - README.md grows past MaxReadmeLines lines: the README is the afternoon's first hour, and
//     the guides in docs/ hold the rest;
//   - the README's architecture drawing (the first code block under "## Architecture", one row
//     of packages per line) no longer matches the code: a drawn package imports a package drawn
//     on its own row or above, a drawn package does not exist, or a package outside internal/
//     is missing from the drawing.
//
// Run it with `go test ./internal/doccheck`.
package doccheck

// MaxReadmeLines is the most lines README.md may have.
const MaxReadmeLines = 320
