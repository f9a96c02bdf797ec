"""The chat engine: MTP speculative decoding (off / embedded head / FastMTP sidecar) with streamed stats."""
