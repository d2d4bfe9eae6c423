"""accounting: the tenant queue of each job

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-07 05:05:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = '0002'
down_revision = '0001'
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table('accounting', schema=None) as batch_op:
        batch_op.add_column(sa.Column('queue', sa.String(), nullable=True))
        batch_op.create_index(batch_op.f('ix_accounting_queue'), ['queue'], unique=False)


def downgrade() -> None:
    with op.batch_alter_table('accounting', schema=None) as batch_op:
        batch_op.drop_index(batch_op.f('ix_accounting_queue'))
        batch_op.drop_column('queue')
