// Package cli is the openxet command line: serve, reindex, limits,
// credentials and version. It is the only package that reads the
// configuration file, OPENXET_* environment variables and flags; it turns
// them into the plain config structs of the other packages.
package cli
