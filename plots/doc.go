// Package plots will draw paper-style figures from results folders. It is empty until the
// plotting work lands; see DESIGN.md.
package plots
