package load

import "openxet/load/report"

// The report of a run is package report's: load measures and fills it in,
// report renders it (WriteText, WriteHTML) and encodes it as JSON.
type (
	Report           = report.Report
	NodeReport       = report.NodeReport
	NodePhase        = report.NodePhase
	NodeTraffic      = report.NodeTraffic
	AccountingReport = report.AccountingReport
	Settings         = report.Settings
	PhaseReport      = report.PhaseReport
	ClassReport      = report.ClassReport
	RouteReport      = report.RouteReport
	TenantThroughput = report.TenantThroughput
	Comparison       = report.Comparison
	RouteComparison  = report.RouteComparison
	AbuserReport     = report.AbuserReport
	AbuserNodeReport = report.AbuserNodeReport
	AttackReport     = report.AttackReport
	EnvelopeReport   = report.EnvelopeReport
	MemoryReport     = report.MemoryReport
	MemSample        = report.MemSample
	Series           = report.Series
	LatencySummary   = report.LatencySummary
	TimeBucket       = report.TimeBucket
	Layout           = report.Layout
)

// fmtBytes writes a byte count as the reports do: "64KiB", "1.5MiB".
var fmtBytes = report.FormatBytes
