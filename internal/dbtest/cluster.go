package dbtest

import "github.com/weirq/weir/internal/pgcluster"

// startCluster starts the throwaway cluster Main uses when no server
// answers, with a "test" database.
func startCluster() (*pgcluster.Cluster, error) {
	return pgcluster.Start(pgcluster.Options{DirPrefix: "dbtest-", Database: "test"})
}
