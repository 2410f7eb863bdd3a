// Package configs holds rankgate's data tables and deploy files. The tables
// are embedded into the binary; config can point at replacements.
package configs

import _ "embed"

// MIGProfiles is the offline MIG profile catalog (mig-profiles.yaml).
//
//go:embed mig-profiles.yaml
var MIGProfiles []byte

// KnownBadDrivers is the table of drivers that break certain node shapes
// (known-bad-drivers.yaml).
//
//go:embed known-bad-drivers.yaml
var KnownBadDrivers []byte
