# The constraint in its own migration: on PostgreSQL a table cannot be altered in the transaction that just
# updated its rows (0014's data step leaves deferred foreign-key checks pending).

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ("agents", "0014_bot_sandbox_of"),
    ]

    operations = [
        migrations.AddConstraint(
            model_name='bot',
            constraint=models.CheckConstraint(condition=models.Q(models.Q(('is_sandbox', False), ('sandbox_of__isnull', True)), models.Q(('is_sandbox', True), ('sandbox_of__isnull', False)), _connector='OR'), name='bot_stand_in_has_its_hub_bot'),
        ),
    ]
