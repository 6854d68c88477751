// Package report is the report of an `openxet load` run: its shape
// (Report and the types under it, which encode as the --json output) and
// its two renderings, readable text tables (WriteText) and one
// self-contained HTML page with inline SVG plots (WriteHTML, from the
// html/template page.html; the plots are drawn in plot.go).
//
// It does not own the measuring: package load runs the scenarios, fills a
// Report in and decides its failures (Report.Finish sets OK from them).
// It imports no openxet package; it does no I/O but writing to the
// io.Writer it is given.
package report
