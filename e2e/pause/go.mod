module localpv.test/pause

go 1.26.0
