"""What every app uses: storable text, our exception types, fields, admin helpers, the enqueue helper and the
intake relay, request parsers, log formatting. A leaf: it imports none of the project's apps (ARCHITECTURE §11.0)."""
