"""The live dashboard: cluster, latency and simulation pages, their selectors and the what-if runs."""
