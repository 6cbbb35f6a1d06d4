// Package weir is a durable background job queue for Go on PostgreSQL.
//
// Jobs are rows. A job inserted with InsertTx inside the caller's transaction exists
// exactly when that transaction commits, and wakes workers only then. Workers lease
// jobs with fencing tokens, so that a write by a worker that lost its lease changes
// nothing; see docs/ for the schema, the state machine and the delivery contract.
//
// A client is built on a driver (weirpgx for PostgreSQL) and a migrated schema:
//
//	pool, _ := pgxpool.New(ctx, "postgres://localhost/app")
//	driver, _ := weirpgx.New(pool, nil)
//	_, _ = weirmigrate.New(driver).Up(ctx, nil)
//	client, _ := weir.NewClient(driver, &weir.Config{})
//	res, _ := client.Insert(ctx, SendEmail{To: "a@example.com"}, nil)
package weir
