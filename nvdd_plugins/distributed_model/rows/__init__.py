"""Rows: who owns which atom and the rank's view of them (owned + ghost rows, edges, padding):
`HaloDomain` (spatial sub-domains that migrate atoms), `GraphDomain` (graph partition: index
shards), `padded_view` (the one view builder) and the chunk grid of a thick shell."""
