package preflight

import (
	"context"

	"github.com/rankgate/rankgate/topology"
)

// LoadTables returns the MIG profile catalog and the known-bad driver
// table: the embedded ones, or the files that replace them (an empty path
// keeps the embedded table). Errors name the file; they are the user's
// input.
func LoadTables(ctx context.Context, catalogFile, driversFile string) (*topology.Catalog, *DriverTable, error) {
	cat := topology.DefaultCatalog()
	if catalogFile != "" {
		var err error
		if cat, err = topology.ReadCatalogFile(ctx, catalogFile); err != nil {
			return nil, nil, err
		}
	}
	drivers := DefaultDriverTable()
	if driversFile != "" {
		var err error
		if drivers, err = ReadDriverTableFile(ctx, driversFile); err != nil {
			return nil, nil, err
		}
	}
	return cat, drivers, nil
}
