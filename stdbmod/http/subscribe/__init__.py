"""SpacetimeDB's subscription surface over HTTP: the `/sql` answer, the WebSocket protocol
(`v1.json.spacetimedb`) and the SATS-JSON forms they share."""
