"""/health (the slots and the queue; 503 once the models cannot run) and /metrics (Prometheus)."""

from __future__ import annotations

import prometheus_client
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from .state import server_state

router = APIRouter()


@router.get("/health")
@router.get("/v1/health")
async def health(request: Request):
    st = server_state(request)
    if st.decoder.lost is not None:
        return JSONResponse({"status": "error", "error": st.decoder.lost}, status_code=503)
    return {"status": "ok", "slots_idle": len(st.pool.free), "slots_processing": st.pool.busy,
            "requests_queued": st.pool.queued}


@router.get("/metrics")
async def prometheus(request: Request):
    return Response(server_state(request).metrics.text(), media_type=prometheus_client.CONTENT_TYPE_LATEST)
