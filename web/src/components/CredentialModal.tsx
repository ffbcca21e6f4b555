/** Shows a cluster's agent credential once, with a copy button and the warning that it is not kept. */
import { Alert, Button, Modal, Space, Typography } from 'antd';
import { useTranslation } from 'react-i18next';

export default function CredentialModal({ credential, cluster, onClose }: { credential: string | null; cluster: string; onClose: () => void }) {
  const { t } = useTranslation();
  return (
    <Modal
      open={Boolean(credential)}
      title={t('credential.title', { cluster })}
      onCancel={onClose}
      mask={{ closable: false }}
      destroyOnHidden
      footer={<Button type="primary" onClick={onClose} data-testid="credential-done">{t('credential.done')}</Button>}
    >
      <Space orientation="vertical" style={{ width: '100%' }}>
        <Alert type="warning" showIcon title={t('credential.warning')} />
        <Typography.Paragraph copyable={{ text: credential ?? '' }} code data-testid="agent-credential" style={{ wordBreak: 'break-all' }}>
          {credential}
        </Typography.Paragraph>
        <Typography.Text type="secondary">{t('credential.hint')}</Typography.Text>
      </Space>
    </Modal>
  );
}
