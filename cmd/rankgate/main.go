// Command rankgate proves that every rank of a distributed GPU job can work
// with the others before the job's training processes start.
package main

import "github.com/rankgate/rankgate/cmd/rankgate/app"

func main() { app.Main() }
