// Package cli is the openxet command line: serve, config check, healthcheck,
// reindex, limits set/get/list, credentials create/list/revoke, load, gc,
// usage, files delete, tenants delete, repos visibility, mirror pull/ls and
// version, in NewApp's order (plus a
// hidden command that is the abuser process of `openxet load --scenario
// abuse`). It is the only package that reads the configuration file,
// OPENXET_* environment variables and flags; it turns them into the plain
// config structs of the other packages.
package cli
