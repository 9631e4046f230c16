from __future__ import annotations

from fastapi import APIRouter, BackgroundTasks

from app.api.deps import Engineer, ServicesDep
from app.api.openapi import ERRORS
from app.diagnoses.service import label_out
from app.labels import service
from app.labels.schemas import LabelCreate, LabelOut
from app.schemas_common import ObjectId

router = APIRouter(tags=["labels"], responses=ERRORS)


@router.post("/v1/diagnoses/{diagnosis_id}/labels", status_code=201, response_model=LabelOut)
def create_label(diagnosis_id: ObjectId, body: LabelCreate, services: ServicesDep, who: Engineer,
                 background: BackgroundTasks) -> LabelOut:
    """Confirm or correct a finished diagnosis; the label names the token that made it. Once
    stored, the labelled case is embedded into the retrieval store (after the response)."""
    with services.db.transaction() as session:
        label = service.create_label(session=session, diagnosis_id=diagnosis_id, data=body,
                                     created_by=who.name)
        out = label_out(label)
    if services.cases is not None:
        background.add_task(services.cases.record, out.diagnosis_id)
    return out
