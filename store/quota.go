package store

// The quota rule of limits.CheckQuota, as SQL for the owner transactions,
// which must check it in the statement that charges the usage (a check
// before the statement would race the other nodes' uploads): a tenant's
// quota is its override (tenants.quota_bytes), else the default quota; an
// upload of n bytes fits when usage + n ≤ quota; a negative quota is
// unlimited. TestQuotaSQLIsCheckQuota holds these fragments to
// limits.CheckQuota's answers on both engines. The arguments are SQL
// expressions (columns, parameters, literals).

// effectiveQuotaSQL is a tenant's quota: its override column, else def.
func effectiveQuotaSQL(override, def string) string {
	return "COALESCE(" + override + ", " + def + ")"
}

// fitsQuotaSQL is true when n more bytes on usage fit quota.
func fitsQuotaSQL(quota, usage, n string) string {
	return "(" + quota + " < 0 OR " + usage + " + " + n + " <= " + quota + ")"
}
