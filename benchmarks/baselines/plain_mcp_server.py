"""Baseline: a plain `mcp` SDK server (MCPServer defaults) with one SQLite table, as a user would write it.

Usage: python benchmarks/baselines/plain_mcp_server.py {http PORT [json]|stdio}
"""

from __future__ import annotations

import sqlite3
import sys

from mcp.server.mcpserver import MCPServer

db = sqlite3.connect(":memory:", check_same_thread=False)
db.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER)")
db.executemany("INSERT INTO items VALUES (?, ?, ?)", [(i, f"item {i}", i % 7) for i in range(1, 301)])
server = MCPServer("plain-baseline")


@server.tool()
def get_item(item_id: int) -> dict:
    """Read one item."""
    row = db.execute("SELECT id, name, qty FROM items WHERE id = ?", (item_id,)).fetchone()
    return {"id": row[0], "name": row[1], "qty": row[2]}


if __name__ == "__main__":
    if sys.argv[1] == "stdio":
        server.run("stdio")
    else:
        import uvicorn

        json_response = len(sys.argv) > 3 and sys.argv[3] == "json"
        app = server.streamable_http_app(json_response=json_response)
        uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
